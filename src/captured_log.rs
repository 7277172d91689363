//! Tests only: captures the warnings logged on the calling test's own
//! thread, so tests running beside it do not mix theirs in.

use std::cell::RefCell;

thread_local! {
    static WARNINGS: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        WARNINGS.with(|w| {
            if let Some(lines) = w.borrow_mut().as_mut() {
                lines.push(record.args().to_string());
            }
        });
    }

    fn flush(&self) {}
}

static CAPTURE: Capture = Capture;

pub fn start() {
    // Another test may have set it already: the same logger either way.
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Warn);
    WARNINGS.with(|w| *w.borrow_mut() = Some(Vec::new()));
}

pub fn warnings() -> Vec<String> {
    WARNINGS.with(|w| w.borrow().clone().unwrap_or_default())
}
