use std::path::{Path, PathBuf};

use super::*;

/// "hunter2", as Debian's mosquitto_passwd wrote it with `-H sha512`.
const BOB_HUNTER2: &str = "bob:$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==\n";

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("saguin-auth-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rule(door: &str, file: Option<&Path>, allow_anonymous: bool) -> DoorRule {
    DoorRule {
        door: door.to_string(),
        password_file: file.map(Path::to_path_buf),
        allow_anonymous,
        trusts_unchecked_names: false,
    }
}

#[test]
fn each_door_answers_by_its_own_rule() {
    let dir = TempDir::new("doors");
    let file = dir.file("clients.passwd", BOB_HUNTER2);
    let auth = Authentication::load(&[
        rule("fleet", Some(&file), false),
        rule("local", None, true),
        rule("mixed", Some(&file), true),
    ])
    .unwrap();
    let fleet = |user, password: Option<&[u8]>| auth.check(0, user, password);
    assert_eq!(fleet(Some("bob"), Some(b"hunter2")), Verdict::Authenticated);
    assert_eq!(
        fleet(Some("bob"), Some(b"hunter3")),
        Verdict::Refused(Refusal::WrongPassword)
    );
    assert_eq!(
        fleet(Some("bob"), None),
        Verdict::Refused(Refusal::NoPassword)
    );
    assert_eq!(
        fleet(Some("eve"), Some(b"hunter2")),
        Verdict::Refused(Refusal::UnknownUser)
    );
    assert_eq!(fleet(None, None), Verdict::Refused(Refusal::NoUserName));
    assert_eq!(auth.check(1, None, None), Verdict::Anonymous);
    // Nothing checks a name here, so it names nobody unless the door
    // trusts unchecked names.
    assert_eq!(auth.check(1, Some("anyone"), None), Verdict::NameIgnored);
    let trusting = Authentication::load(&[DoorRule {
        trusts_unchecked_names: true,
        ..rule("local", None, true)
    }])
    .unwrap();
    assert_eq!(trusting.check(0, Some("anyone"), None), Verdict::Unchecked);
    // Mixed: named clients are checked, the rest let in.
    assert_eq!(auth.check(2, None, None), Verdict::Anonymous);
    assert_eq!(
        auth.check(2, Some("bob"), Some(b"nope")),
        Verdict::Refused(Refusal::WrongPassword)
    );
    assert_eq!(auth.files().len(), 1, "one path is read once");
}

#[test]
fn no_rules_admit_everybody() {
    let auth = Authentication::default();
    assert_eq!(auth.check(0, None, None), Verdict::Anonymous);
    assert_eq!(auth.check(3, Some("x"), Some(b"y")), Verdict::Unchecked);
    assert_eq!(auth.summary(), "no password file");
}

#[test]
fn an_empty_file_on_a_door_admitting_nobody_else_is_refused() {
    let dir = TempDir::new("empty");
    let file = dir.file("clients.passwd", "# nobody yet\n");
    let errors = Authentication::load(&[rule("fleet", Some(&file), false)]).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].why.contains("names no user"), "{errors:?}");
    assert!(Authentication::load(&[rule("fleet", Some(&file), true)]).is_ok());
}

#[test]
fn every_file_s_faults_are_named_each_file_once() {
    let dir = TempDir::new("faults");
    let bad = dir.file("bad.passwd", "nocolon\n:x\n");
    let missing = dir.file("gone.passwd", "");
    std::fs::remove_file(&missing).unwrap();
    let errors = Authentication::load(&[
        rule("a", Some(&bad), false),
        rule("b", Some(&missing), false),
        rule("c", Some(&bad), false),
    ])
    .unwrap_err();
    let said: Vec<(PathBuf, Vec<usize>)> = errors
        .iter()
        .map(|e| (e.path.clone(), e.lines.clone()))
        .collect();
    assert_eq!(
        said,
        vec![(bad.clone(), vec![1]), (bad, vec![2]), (missing, vec![])]
    );
}

#[test]
fn a_reload_reads_the_same_files_again_or_nothing() {
    let dir = TempDir::new("reload");
    let file = dir.file("clients.passwd", BOB_HUNTER2);
    let auth = Authentication::load(&[rule("fleet", Some(&file), false)]).unwrap();
    assert_eq!(
        auth.check(0, Some("carol"), Some(b"hunter2")),
        Verdict::Refused(Refusal::UnknownUser)
    );
    dir.file("clients.passwd", &BOB_HUNTER2.replace("bob", "carol"));
    let reloaded = auth.reload().unwrap();
    assert_eq!(
        reloaded.check(0, Some("carol"), Some(b"hunter2")),
        Verdict::Authenticated
    );
    dir.file("clients.passwd", "carol:broken\n");
    let errors = reloaded.reload().unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].lines, vec![1]);
    // What was loaded is untouched by a failed reload.
    assert_eq!(
        reloaded.check(0, Some("carol"), Some(b"hunter2")),
        Verdict::Authenticated
    );
    assert!(reloaded.summary().ends_with("clients.passwd (1 users)"));
}

#[test]
fn a_reload_checks_unknown_users_against_the_new_file_s_costliest_entry() {
    let dir = TempDir::new("stand-in");
    let dear = |iterations: u32| hash::PasswordHash::Pbkdf2Sha512 {
        iterations,
        salt: Box::new([2; 12]),
        digest: [0; 64],
    };
    let file = dir.file(
        "clients.passwd",
        &format!("{BOB_HUNTER2}dear:{}\n", dear(500)),
    );
    let auth = Authentication::load(&[rule("fleet", Some(&file), false)]).unwrap();
    assert_eq!(auth.files()[0].stand_in(), Some(&dear(500)));
    dir.file(
        "clients.passwd",
        &format!("{BOB_HUNTER2}dear:{}\ndearer:{}\n", dear(500), dear(900)),
    );
    let reloaded = auth.reload().unwrap();
    assert_eq!(reloaded.files()[0].stand_in(), Some(&dear(900)));
}
