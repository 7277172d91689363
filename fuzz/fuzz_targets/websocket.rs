//! Feeds arbitrary bytes to the WebSocket frame reader, as a server's and
//! as a client's, and to both sides of the upgrade handshake. Nothing may
//! panic, and the frames read the same however the bytes are cut: read
//! whole or in pieces, the same payload, pong, close, or close code.

#![no_main]

use libfuzzer_sys::fuzz_target;
use saguin::net::websocket::frame::{Reader, Role};
use saguin::net::websocket::{handshake, Origins};

/// What reading `data` in pieces of `cut` bytes leads to.
fn read_in_pieces(role: Role, data: &[u8], cut: usize) -> Result<(Vec<u8>, Option<Vec<u8>>, Option<u16>), u16> {
    let mut reader = Reader::new(role, 1 << 16);
    let mut payload = Vec::new();
    let mut pong = None;
    for piece in data.chunks(cut.max(1)) {
        let mut piece = piece.to_vec();
        let n = reader.read(&mut piece).map_err(|failure| failure.code)?;
        assert!(n <= piece.len());
        payload.extend_from_slice(&piece[..n]);
        if let Some(latest) = reader.take_pong() {
            pong = Some(latest.to_vec());
        }
    }
    Ok((payload, pong, reader.closed()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let role = if control & 0x80 == 0 { Role::Server } else { Role::Client };
    let cut = usize::from(control & 0x7f) + 1;
    let whole = read_in_pieces(role, rest, rest.len());
    let pieces = read_in_pieces(role, rest, cut);
    assert_eq!(whole, pieces, "cut into pieces of {cut}");

    let origins = Origins::new(control & 1 == 0, vec!["https://dash.example.com".into()]);
    let _ = handshake::answer(rest, &origins, control & 2 == 0);
    let _ = handshake::check_answer(rest, "dGhlIHNhbXBsZSBub25jZQ==");
});
