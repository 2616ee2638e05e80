//! A fake Slack to try `calvin-gateway` with, by hand: the tests' fake Web
//! API and Socket Mode (built from Slack's method contracts) on loopback,
//! with a channel, a person in it and a thread. It prints the `[slack]`
//! section and the session's flags to use, then each message, file, edit
//! and reaction the gateway makes, until Ctrl-C.
//!
//! ```sh
//! cargo run -p calvin-tests --example fake_slack
//! ```

use std::time::Duration;

use calvin_tests::fake_slack::FakeSlack;

const BOT_TOKEN: &str = "xoxb-calvin-try-it";
const CHANNEL: &str = "C0TRYIT01";
const PERSON: &str = "U0YOU0001";

#[tokio::main]
async fn main() {
    let slack = FakeSlack::start(BOT_TOKEN, &[CHANNEL]).await;
    slack.add_user(PERSON, "You");
    slack.set_members(CHANNEL, &[PERSON]);
    let thread = slack.add_message(CHANNEL, PERSON, "a task for the session", None);
    println!("A fake Slack at {}. In gateway.toml:\n", slack.api_url());
    println!("[slack]");
    println!("api_url = \"{}\"", slack.api_url());
    println!("bot_token = \"{BOT_TOKEN}\"");
    println!(
        "app_token = \"{}\"   # for `serve`: Socket Mode",
        slack.app_token()
    );
    println!("\nThe session: --channel {CHANNEL} --thread-ts {thread} --owner {PERSON}");
    println!(
        "(a POST /sessions body: {{\"channel\": \"{CHANNEL}\", \"thread_ts\": \"{thread}\", \"owner\": \"{PERSON}\", \"session_dir\": \"...\"}})\n"
    );
    println!("What the gateway does in Slack shows below. Ctrl-C stops.\n");

    let (mut messages, mut files, mut updates, mut reactions) = (0, 0, 0, 0);
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::signal::ctrl_c() => return,
        }
        for m in slack.messages().iter().skip(messages) {
            let text = m.text.as_deref().unwrap_or("(blocks only)");
            let blocks = m
                .blocks
                .as_ref()
                .map_or(String::new(), |b| format!(" + blocks {b}"));
            println!(
                "message {} in {} (thread {:?}): {text}{blocks}",
                m.ts, m.channel, m.thread_ts
            );
            messages += 1;
        }
        for f in slack.files().iter().skip(files) {
            println!(
                "file {} ({}) in {:?}: {:?}",
                f.filename, f.title, f.channel, f.initial_comment
            );
            files += 1;
        }
        for u in slack.updates().iter().skip(updates) {
            println!("edited {} in {}: {:?}", u.ts, u.channel, u.text);
            updates += 1;
        }
        for r in slack.reactions_added().iter().skip(reactions) {
            println!("reaction {r:?}");
            reactions += 1;
        }
    }
}
