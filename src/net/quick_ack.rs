//! Acknowledging a client's segments at once.
//!
//! A client with Nagle's algorithm on (every client's default) writes a
//! second small packet only once its first is acknowledged. Paho answers a
//! job, or a request, and then writes the PUBACK for it: two small writes.
//! When the broker has nothing to send back after one of them - a PUBACK
//! needs no reply - the kernel holds its ACK for the delayed-ACK time
//! (40 ms on Linux) hoping to carry it on data, and the client's next
//! write waits that long behind it. Asking for a quick ACK after every read
//! sends the ACK now: one small segment, instead of a stall.

use std::os::fd::AsFd;

/// Asks the kernel to acknowledge what has been read without delay. Linux
/// clears the setting as it goes, so it is set again after each read.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn acknowledge_now(socket: impl AsFd) {
    // A socket that refuses it is only slower: nothing to report.
    let _ = rustix::net::sockopt::set_tcp_quickack(socket, true);
}

/// Other kernels have no per-read switch; their delayed ACK stands.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn acknowledge_now(_socket: impl AsFd) {}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use rustix::net::sockopt::tcp_quickack;

    use super::acknowledge_now;

    /// Exchanges one small message each way, as request and reply.
    fn exchange(client: &mut TcpStream, server: &mut TcpStream) {
        let mut byte = [0u8; 1];
        client.write_all(b"q").unwrap();
        server.read_exact(&mut byte).unwrap();
        server.write_all(b"a").unwrap();
        client.read_exact(&mut byte).unwrap();
    }

    #[test]
    fn a_socket_in_interactive_mode_is_switched_to_acknowledging_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        // Replies sent right after reads put the server's socket in the
        // kernel's interactive (delayed-ACK) mode.
        for _ in 0..64 {
            if !tcp_quickack(&server).unwrap() {
                break;
            }
            exchange(&mut client, &mut server);
        }
        assert!(
            !tcp_quickack(&server).unwrap(),
            "the kernel never delayed this socket's ACKs"
        );
        acknowledge_now(&server);
        assert!(tcp_quickack(&server).unwrap());
    }
}
