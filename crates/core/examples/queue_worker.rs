//! A worker in Rust for examples/polyglot: answers "who are you?", consumes the work queue
//! `jobs`, sends each result (`{"n": N, "square": N*N}`) to `coordinator` and acks the task;
//! stops when the coordinator says "stop".
//!
//!     cargo run -p agentwire --example queue_worker -- HUB_URL CA_PEM ID

use agentwire::agent_queues::QueueTask;
use agentwire::{Agent, AgentOptions, Destination, HubTrust, Kind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, hub, ca, id] = args.as_slice() else {
        return Err("usage: queue_worker HUB_URL CA_PEM ID".into());
    };
    let trust = HubTrust::ca_file(std::path::Path::new(ca))?;
    let mut agent = Agent::connect(AgentOptions::new(id.as_str(), hub.as_str(), trust)).await?;
    agent.consume("jobs", 4).await?;
    println!("{id} connected over {}", agent.transport().name());
    let mut handled = 0;
    while let Some(msg) = agent.recv().await {
        if msg.envelope.kind == Kind::Request {
            msg.reply(format!("{id}, Rust")).await?;
        } else if let Some(task) = QueueTask::from_envelope(&msg.envelope) {
            let job: serde_json::Value = serde_json::from_slice(&task.body)?;
            let n = job["n"].as_u64().ok_or("a task without n")?;
            let result = serde_json::json!({"n": n, "square": n * n}).to_string();
            let env = agent
                .envelope(Destination::agent("coordinator"), Kind::Event)
                .with_header("result", "square")
                .with_body(result);
            agent.send_envelope(env).await?;
            agent.ack(task.task).await?;
            handled += 1;
        } else if &msg.envelope.body[..] == b"stop" {
            break;
        }
    }
    println!("{id} handled {handled} tasks");
    agent.close().await;
    Ok(())
}
