//! A minimal status watcher: how many tasks familiar is running, and each task as it
//! finishes with what it cost, from the daemon's signals alone (no polling). What a bar
//! module or a script does with `familiar-protocol`:
//!
//! ```sh
//! cargo run -p familiar-protocol --example watch
//! ```

// An example prints: that is its whole job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use familiar_protocol::Error;
use familiar_protocol::events::EventPayload;
use familiar_protocol::proxy::Agent1Proxy;
use futures::StreamExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let connection = zbus::Connection::session().await?;
    let agent = Agent1Proxy::new(&connection).await?;
    // Subscribe before reading the count, so no finish falls between the two.
    let mut events = agent.receive_task_event().await?;
    match agent.active_tasks().await {
        Ok(n) => println!("familiar {}: {n} running", agent.version().await?),
        // A typed error: `Error::ZBus` is the bus (no daemon, no activation file).
        Err(e) => eprintln!("familiar is not running ({e}); waiting for it"),
    }
    while let Some(signal) = events.next().await {
        let args = signal.args()?;
        // The other kinds, and kinds a newer daemon adds, are not this watcher's.
        let Ok(EventPayload::TaskFinished {
            status,
            result,
            usage,
            ..
        }) = EventPayload::from_signal(&args.kind, &args.payload_json)
        else {
            continue;
        };
        println!(
            "{} {status}: {} ({} tokens)",
            args.task_id,
            first_line(&result),
            usage.total()
        );
    }
    Ok(())
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
