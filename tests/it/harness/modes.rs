//! The modes a test runs in ([`Mode`]), and [`in_modes!`](crate::in_modes), which makes one
//! `#[tokio::test]` of a test function per mode.

/// How a test's server decides and writes: on standard or flash-sale vouchers, with the limit
/// in one counter slot or split across several, reservations written one by one or grouped
/// into batches (group commit), and in mode A or mode B (on which broker).
///
/// Built from [`Mode::standard`] or [`Mode::flash`]: `Mode::flash().slots(8).grouped()`.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    pub flash: bool,
    /// Counter slots of the vouchers [`TestApp::voucher`](super::TestApp::voucher) creates.
    pub slots: i64,
    /// `reservations.group_commit_max`: 1 writes each reservation on its own.
    pub group_commit_max: usize,
    /// Mode B, on this broker (None: mode A).
    pub mode_b: Option<Broker>,
}

/// What carries mode B's events.
#[derive(Debug, Clone, Copy)]
pub enum Broker {
    Kafka,
    /// SQS, on the fast local emulator (fauxqs): the contract tests send thousands of events.
    Sqs,
}

/// Most reservations one group-commit batch holds in the grouped modes.
const GROUPED: usize = 32;

impl Mode {
    /// Standard vouchers (Postgres decides), one counter slot, written one by one, mode A.
    pub const fn standard() -> Mode {
        Mode {
            flash: false,
            slots: 1,
            group_commit_max: 1,
            mode_b: None,
        }
    }

    /// Flash-sale vouchers (the Redis gate decides), one counter slot, written one by one,
    /// mode A.
    pub const fn flash() -> Mode {
        Mode {
            flash: true,
            ..Mode::standard()
        }
    }

    /// The limit split across `k` counter slots.
    pub const fn slots(self, k: i64) -> Mode {
        Mode { slots: k, ..self }
    }

    /// Reservations written together, in batches (group commit).
    pub const fn grouped(self) -> Mode {
        Mode {
            group_commit_max: GROUPED,
            ..self
        }
    }

    /// Mode B: flash winners travel as events on `broker`.
    pub const fn mode_b(self, broker: Broker) -> Mode {
        Mode {
            mode_b: Some(broker),
            ..self
        }
    }
}

/// One `#[tokio::test]` per mode of each test function named, in a module per mode:
///
/// ```ignore
/// in_modes!([standard = Mode::standard(), flash = Mode::flash()] {a_test, another});
/// ```
///
/// makes `standard::a_test`, calling `a_test(Mode::standard())`, and so on.
#[macro_export]
macro_rules! in_modes {
    ([$($module:ident = $mode:expr),* $(,)?] $tests:tt) => {
        $($crate::in_modes!(@module $module, $mode, $tests);)*
    };
    (@module $module:ident, $mode:expr, {$($name:ident),* $(,)?}) => {
        mod $module {
            #[allow(unused_imports)]
            use $crate::harness::{Broker, Mode};
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                super::$name($mode).await
            })*
        }
    };
}
