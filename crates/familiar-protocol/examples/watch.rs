//! A minimal status watcher: how many tasks familiar is running, and each task as it
//! finishes, from the daemon's signals alone (no polling). What a bar module or a
//! script does with `familiar-protocol`:
//!
//! ```sh
//! cargo run -p familiar-protocol --example watch
//! ```

// An example prints: that is its whole job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use familiar_protocol::proxy::Agent1Proxy;
use futures::StreamExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> zbus::Result<()> {
    let connection = zbus::Connection::session().await?;
    let agent = Agent1Proxy::new(&connection).await?;
    // Subscribe before reading the count, so no finish falls between the two.
    let mut finished = agent.receive_task_finished().await?;
    match agent.active_tasks().await {
        Ok(n) => println!("familiar {}: {n} running", agent.version().await?),
        Err(e) => eprintln!("familiar is not running ({e}); waiting for it"),
    }
    while let Some(signal) = finished.next().await {
        let args = signal.args()?;
        println!(
            "{} {}: {}",
            args.task_id,
            args.status,
            first_line(&args.result)
        );
    }
    Ok(())
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
