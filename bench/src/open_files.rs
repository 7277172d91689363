//! The open-files limit of this process, raised for the figures that hold
//! thousands of connections. A broker spawned afterwards inherits it, so
//! one call covers the bench's ends of the connections and the broker's.

use std::ffi::{c_int, c_ulong};

/// `RLIMIT_NOFILE` on Linux (x86, ARM and most others).
const RLIMIT_NOFILE: c_int = 7;

/// `struct rlimit` of glibc and musl on Linux: two `rlim_t`, which are
/// `unsigned long`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rlimit {
    soft: c_ulong,
    hard: c_ulong,
}

extern "C" {
    fn getrlimit(resource: c_int, limit: *mut Rlimit) -> c_int;
    fn setrlimit(resource: c_int, limit: *const Rlimit) -> c_int;
}

/// Makes the soft limit at least `needed`, within the hard limit; returns
/// the soft limit in force afterwards, or why it cannot be raised.
pub fn ensure(needed: u64) -> Result<u64, String> {
    let mut current = Rlimit { soft: 0, hard: 0 };
    // SAFETY: `current` is a valid, writable `struct rlimit`.
    if unsafe { getrlimit(RLIMIT_NOFILE, &mut current) } != 0 {
        return Err(format!(
            "cannot read the open files limit: {}",
            std::io::Error::last_os_error()
        ));
    }
    let Some(raised) = raised_limit(current, needed)? else {
        return Ok(widen(current.soft));
    };
    // SAFETY: `raised` is a valid `struct rlimit` that outlives the call.
    if unsafe { setrlimit(RLIMIT_NOFILE, &raised) } != 0 {
        return Err(format!(
            "cannot raise the open files limit from {} to {needed}: {}",
            current.soft,
            std::io::Error::last_os_error()
        ));
    }
    Ok(widen(raised.soft))
}

/// An `rlim_t` as a u64: it is 32 bits wide on armv7, 64 on x86_64.
#[allow(clippy::unnecessary_cast)]
fn widen(limit: c_ulong) -> u64 {
    limit as u64
}

/// The limit to set so that `needed` descriptors fit, or `None` when the
/// current one already allows them.
fn raised_limit(current: Rlimit, needed: u64) -> Result<Option<Rlimit>, String> {
    if widen(current.soft) >= needed {
        return Ok(None);
    }
    if widen(current.hard) < needed {
        return Err(format!(
            "{needed} open files are needed and the hard limit is {}; raise it \
             (`ulimit -Hn {needed}` as root, or LimitNOFILE= for a service) and run again",
            current.hard
        ));
    }
    Ok(Some(Rlimit {
        soft: needed as c_ulong,
        hard: current.hard,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_what_is_needed_and_no_further() {
        let current = Rlimit {
            soft: 1024,
            hard: 524_288,
        };
        assert_eq!(
            raised_limit(current, 20_256),
            Ok(Some(Rlimit {
                soft: 20_256,
                hard: 524_288
            }))
        );
        assert_eq!(raised_limit(current, 1000), Ok(None));
    }

    #[test]
    fn a_hard_limit_below_the_need_is_named_with_its_fix() {
        let current = Rlimit {
            soft: 1024,
            hard: 4096,
        };
        let error = raised_limit(current, 10_256).unwrap_err();
        assert!(error.contains("hard limit is 4096"), "{error}");
        assert!(error.contains("ulimit -Hn 10256"), "{error}");
    }

    #[test]
    fn the_limit_of_this_process_can_be_read_and_kept() {
        let soft = ensure(16).expect("the limit is readable");
        assert!(soft >= 16);
    }
}
