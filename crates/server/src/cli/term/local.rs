//! `steward chat` without a URL: this binary's own `serve` started beside
//! the chat, as a child process, on a loopback port the OS picked, with no
//! state directory, its log in a temporary file; chatted with once
//! `/ready` answers, ended with the chat.
//!
//! A child rather than `serve` on a thread of this process: `serve`
//! drains on SIGINT (the chat's Ctrl-C must stop a reply, not the server),
//! logs to this terminal, and ends the process when it stops. The child
//! has a process group of its own (the terminal's Ctrl-C reaches the chat
//! only), dies with the chat (`PR_SET_PDEATHSIG`, also when the chat is
//! killed), and is sent SIGTERM (a drain) when the chat ends.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Endpoint;

pub(crate) struct LocalServer {
    child: Child,
    pub(crate) base: String,
    log: PathBuf,
}

impl LocalServer {
    /// Start it; wait until it is ready (the default model may have to be
    /// fetched first: no deadline while the child lives), Ctrl-C gives up.
    pub(crate) async fn start(args: &[String], key: Option<&str>) -> anyhow::Result<LocalServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::env::temp_dir().join(format!("steward-chat-{}.log", std::process::id()));
        let out = File::create(&log)?;
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--state-dir", "none"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        if let Some(k) = key {
            cmd.env("STEWARD_API_KEY", k);
        }
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: prctl and getppid are async-signal-safe; nothing else
        // runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0
                    || libc::getppid() != parent
                {
                    return Err(std::io::Error::other("the chat ended before its server"));
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        let mut s = LocalServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        eprintln!(
            "steward chat: serving the default model on {} for this chat (log: {})…",
            s.base,
            s.log.display()
        );
        let stop = tokio::signal::ctrl_c();
        tokio::pin!(stop);
        tokio::select! {
            r = s.ready(key) => r?,
            _ = &mut stop => anyhow::bail!("interrupted while the server started"),
        }
        Ok(s)
    }

    async fn ready(&mut self, key: Option<&str>) -> anyhow::Result<()> {
        let ep = Endpoint::new(&self.base, key.map(str::to_string))?;
        loop {
            if let Some(st) = self.child.try_wait()? {
                anyhow::bail!(
                    "the server exited ({st}) before it was ready; its log ({}) ends:\n{}",
                    self.log.display(),
                    tail(&self.log)
                );
            }
            if let Ok(r) = ep
                .get("/ready")
                .timeout(Duration::from_secs(2))
                .send()
                .await
            {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for LocalServer {
    /// SIGTERM (it drains: nothing is in flight), then SIGKILL after 10 s.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: a plain kill(2) of our own child's pid.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let t = Instant::now();
            while matches!(self.child.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A log's last lines.
fn tail(p: &std::path::Path) -> String {
    let t = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
