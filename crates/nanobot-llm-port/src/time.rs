//! Injected time: what policies read instead of the system clock, so idle timers, backoff and
//! timestamps can be tested with tokio's paused time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A boxed, sendable future, as [`Clock::sleep`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The source of "now" and of waiting.
#[cfg_attr(feature = "test-util", mockall::automock)]
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;

    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

impl<T: Clock + ?Sized> Clock for Arc<T> {
    fn now(&self) -> DateTime<Utc> {
        (**self).now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        (**self).sleep(duration)
    }
}

/// The system clock, for any executor: `now` is the wall clock; `sleep` parks a helper
/// thread for the duration and wakes the future, so it needs no runtime. Under tokio prefer
/// [`TokioClock`](crate::TokioClock) (feature `tokio`), whose sleeps are timers.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(ThreadSleep::new(duration))
    }
}

/// A future that a helper thread completes after a duration.
struct ThreadSleep {
    state: Arc<std::sync::Mutex<(bool, Option<std::task::Waker>)>>,
    duration: Option<Duration>,
}

impl ThreadSleep {
    fn new(duration: Duration) -> Self {
        ThreadSleep {
            state: Arc::new(std::sync::Mutex::new((duration.is_zero(), None))),
            duration: Some(duration),
        }
    }
}

impl Future for ThreadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.0 {
                return std::task::Poll::Ready(());
            }
            state.1 = Some(cx.waker().clone());
        }
        if let Some(duration) = self.duration.take() {
            let state = Arc::clone(&self.state);
            std::thread::spawn(move || {
                std::thread::sleep(duration);
                let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
                state.0 = true;
                if let Some(waker) = state.1.take() {
                    waker.wake();
                }
            });
        }
        std::task::Poll::Pending
    }
}

/// The clock for programs on tokio: sleeps are tokio timers.
///
/// [`TokioClock::system`] reads the wall clock. [`TokioClock::starting_at`] starts at a
/// fixed time and advances with tokio's clock, so under `tokio::time::pause()` both `now`
/// and `sleep` follow virtual time and tests neither wait nor depend on the date.
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    anchor: Option<(DateTime<Utc>, tokio::time::Instant)>,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// Wall-clock time, tokio sleeps.
    pub fn system() -> Self {
        TokioClock { anchor: None }
    }

    /// Time that starts at `start` now and advances with tokio's clock (virtual when paused).
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        TokioClock {
            anchor: Some((start, tokio::time::Instant::now())),
        }
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        match self.anchor {
            None => Utc::now(),
            Some((start, origin)) => {
                let elapsed =
                    chrono::Duration::from_std(origin.elapsed()).unwrap_or(chrono::Duration::MAX);
                start
                    .checked_add_signed(elapsed)
                    .unwrap_or(DateTime::<Utc>::MAX_UTC)
            }
        }
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}
