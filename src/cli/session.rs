//! `wmreplay prepare` and `ack`: session deltas kept in the state store.

use std::path::PathBuf;

use crate::Format;
use clap::Args;

use super::Failure;
use super::args::*;

/// Arguments of `wmreplay prepare`.
#[derive(Args, Debug)]
pub struct PrepareArgs {
    #[command(flatten)]
    pub log: LogArgs,
    /// The conversation whose position is used.
    #[arg(long, value_name = "K")]
    pub session_key: String,
    /// Body format: xml (<memory_context> or <memory_delta>), or the
    /// messages alone as anthropic, openai or ndjson.
    #[arg(long, default_value = "xml", value_parser = parse_format)]
    pub format: Format,
    /// Keep only records whose session_id is ID, and records with none.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Arguments of `wmreplay ack`.
#[derive(Args, Debug)]
pub struct AckArgs {
    /// The working-memory log the prepare was made on.
    pub log: PathBuf,
    /// The id `wmreplay prepare` printed.
    pub prepare_id: String,
    /// How the turn went.
    #[arg(long, value_parser = ["success", "failed"])]
    pub status: String,
    /// The state store [default: LOG.wmreplay.db].
    #[arg(long, value_name = "PATH")]
    pub state: Option<PathBuf>,
}

/// `wmreplay prepare`.
pub fn prepare(args: PrepareArgs) -> Result<(), Failure> {
    let PrepareArgs {
        log,
        session_key,
        format,
        session,
        select,
        engine,
    } = args;
    let sel = select.selection(session)?;
    if sel.facts && format == Format::Xml {
        return Err(Failure::Usage(
            "--facts has no place in the XML document: use --format anthropic, openai or ndjson \
             (the facts message comes last)"
                .into(),
        ));
    }
    // Before the store is made: with --require-log a missing log leaves
    // nothing behind. Without it, the store is made (the prepare of the
    // empty log must be there for its ack).
    super::args::file_only(&log.log, "prepare", "each session's acknowledged position")?;
    log.check()?;
    let log = log.log;
    let store = std::sync::Mutex::new(crate::state::Store::open(select.store_path(&log))?);
    let options = replay_options(&engine, 0);
    let prepared = crate::state::prepare(
        &store,
        &crate::state::PrepareRequest {
            log: &log,
            session_key: &session_key,
            format,
            selection: &sel,
            options: &options,
        },
    )?;
    write_stdout(|w| {
        prepared.write_json(w)?;
        w.write_all(b"\n")
    })
}

/// `wmreplay ack`.
pub fn ack(args: AckArgs) -> Result<(), Failure> {
    let AckArgs {
        log,
        prepare_id,
        status,
        state,
    } = args;
    let path = state.unwrap_or_else(|| crate::state::Store::path_for(&log));
    // A store is never made here: where there is none (a log never
    // prepared, a mistyped path), no prepare_id is known.
    let Some(mut store) = crate::state::Store::open_existing(&path)? else {
        return Err(Failure::NotFound(format!(
            "unknown prepare_id {prepare_id:?}: there is no state store at {} (prepare makes it)",
            path.display()
        )));
    };
    let acked = store.ack(&prepare_id, status == "success")?;
    let position = acked
        .position
        .map_or_else(|| "null".to_string(), |p| p.to_string());
    write_stdout(|w| {
        writeln!(
            w,
            "{{\"ok\":true,\"status\":\"{status}\",\"position\":{position},\"repeated\":{}}}",
            acked.repeated
        )
    })
}
