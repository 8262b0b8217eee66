//! `wmreplay token`: a new token scoped to logs, and its line for
//! `serve --token-file`.

use std::io::{BufRead, Write};

use clap::Args;

use super::Failure;

#[derive(Args, Debug)]
pub struct TokenArgs {
    /// What the token may do: read (replays, context, search, stats,
    /// facts), write (that and turns, records, facts, MCP), or admin (every
    /// log, and /metrics).
    #[arg(long, default_value = "write", value_parser = ["read", "write", "admin"])]
    access: String,
    /// The logs it opens: ids separated by commas, `prefix*` for every id
    /// that begins so, or `*` for all (not with admin, which opens all).
    #[arg(long, value_name = "IDS")]
    logs: Option<String>,
    /// Read the token from standard input (one line) instead of making a
    /// new one: for a token you already have.
    #[arg(long)]
    stdin: bool,
}

/// Prints the token (a new one: 32 random bytes, base64url) and the line
/// that grants it, checked as `serve` will read it.
pub fn token(args: TokenArgs) -> Result<(), Failure> {
    let token = if args.stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| Failure::Io(format!("standard input: {e}")))?;
        let t = line.trim().to_string();
        if t.is_empty() {
            return Err(Failure::Usage("--stdin: no token on standard input".into()));
        }
        t
    } else {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| Failure::Io(format!("cannot get random bytes: {e}")))?;
        format!("wmr_{}", base64url(&bytes))
    };
    let mut line = format!(
        "{}  {}",
        crate::server::token_line_hash(&token),
        args.access
    );
    match (&args.logs, args.access.as_str()) {
        (Some(_), "admin") => {
            return Err(Failure::Usage(
                "--logs: an admin token opens every log; name none".into(),
            ));
        }
        (Some(logs), _) => {
            line.push_str("  ");
            line.push_str(logs);
        }
        (None, "admin") => {}
        (None, _) => {
            return Err(Failure::Usage(
                "--logs is required: the ids the token opens (alpha,team-*), or * for all".into(),
            ));
        }
    }
    // Checked as the server reads it: a bad id is said now, not at start.
    crate::server::TokenFile::parse(&line, "--logs")
        .map_err(|e| Failure::Usage(e.trim_start_matches("--logs:1: ").to_string()))?;
    let mut out = std::io::stdout().lock();
    let shown = if args.stdin {
        ""
    } else {
        "# the token (give it to its client; only its hash is kept):\n"
    };
    write!(
        out,
        "{shown}{}# its line for serve --token-file (the file is read again on SIGHUP):\n{line}\n",
        if args.stdin {
            String::new()
        } else {
            format!("{token}\n")
        }
    )
    .map_err(|e| Failure::Io(format!("standard output: {e}")))?;
    Ok(())
}

/// `bytes` in base64url without padding (RFC 4648 §5).
fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64url_is_rfc4648s() {
        assert_eq!(super::base64url(b""), "");
        assert_eq!(super::base64url(b"f"), "Zg");
        assert_eq!(super::base64url(b"fo"), "Zm8");
        assert_eq!(super::base64url(b"foo"), "Zm9v");
        assert_eq!(super::base64url(b"foob"), "Zm9vYg");
        assert_eq!(super::base64url(&[0xfb, 0xff]), "-_8");
    }
}
