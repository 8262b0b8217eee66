//! The signals that stop a long-running command (`serve`, `mcp`).

/// Resolves on SIGINT (Ctrl-C) or SIGTERM; on Windows on Ctrl-C, Ctrl-Break,
/// the console closing or the system shutting down. Called inside the
/// runtime: on Unix the handlers are installed by the call, not at the
/// future's first poll, so a signal that comes while the server is still
/// starting (replaying, folding) shuts it down instead of killing it.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (mut int, mut term) = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let int = async {
                match int.as_mut() {
                    Some(s) => drop(s.recv().await),
                    None => std::future::pending::<()>().await,
                }
            };
            let term = async {
                match term.as_mut() {
                    Some(s) => drop(s.recv().await),
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = int => {}
                () = term => {}
            }
        }
        // Windows: Ctrl-C, Ctrl-Break, the console closed, or the system
        // shutting down.
        #[cfg(windows)]
        {
            use tokio::signal::windows::{ctrl_break, ctrl_close, ctrl_shutdown};
            let ctrl_c = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            let term = async {
                match (ctrl_break(), ctrl_close(), ctrl_shutdown()) {
                    (Ok(mut b), Ok(mut c), Ok(mut s)) => {
                        tokio::select! {
                            _ = b.recv() => {}
                            _ = c.recv() => {}
                            _ = s.recv() => {}
                        }
                    }
                    _ => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = ctrl_c => {}
                () = term => {}
            }
        }
    }
}
