//! Which messages of a thread the chat-thread readers show when it is
//! longer than asked: list_thread's first message and latest ones
//! ([`first_and_latest`]), read_post's linked post with the thread around
//! it ([`around`]), and how many each leaves out ([`LeftOut`]).

use crate::chat::ThreadMessage;

/// How many messages of a thread an answer leaves out, before and after
/// those it shows (the thread's first message aside).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LeftOut {
    pub earlier: usize,
    pub later: usize,
}

impl LeftOut {
    pub fn total(self) -> usize {
        self.earlier + self.later
    }

    /// ` (3 earlier and 2 later left out)`, or nothing.
    pub fn note(self) -> String {
        match (self.earlier, self.later) {
            (0, 0) => String::new(),
            (n, 0) => format!(" ({n} earlier left out)"),
            (0, m) => format!(" ({m} later left out)"),
            (n, m) => format!(" ({n} earlier and {m} later left out)"),
        }
    }
}

/// list_thread's: the first message and the latest `max - 1` others,
/// oldest first.
pub fn first_and_latest(thread: &[ThreadMessage], max: usize) -> (Vec<&ThreadMessage>, LeftOut) {
    if thread.len() <= max {
        return (thread.iter().collect(), LeftOut::default());
    }
    let mut picked = vec![&thread[0]];
    picked.extend(&thread[thread.len() - (max - 1)..]);
    let earlier = thread.len() - max;
    (picked, LeftOut { earlier, later: 0 })
}

/// read_post's: at most `max` messages, oldest first, always holding the
/// post at `at`: the thread's first message (what the thread is about)
/// when there is room for it besides the post, then the messages around
/// the post, as many before it as after it where the thread allows.
pub fn around(thread: &[ThreadMessage], at: usize, max: usize) -> (Vec<&ThreadMessage>, LeftOut) {
    let n = thread.len();
    if n <= max {
        return (thread.iter().collect(), LeftOut::default());
    }
    let with_first = at > 0 && max >= 2;
    let base = usize::from(with_first);
    // The window around the post, the post included.
    let room = max.max(1) - base;
    let start = at.saturating_sub((room - 1) / 2).max(base);
    let end = (start + room).min(n);
    let start = end - room;
    let mut picked = Vec::with_capacity(max);
    if with_first {
        picked.push(&thread[0]);
    }
    picked.extend(&thread[start..end]);
    let left = LeftOut {
        earlier: start - base,
        later: n - end,
    };
    (picked, left)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(ts: &str) -> ThreadMessage {
        ThreadMessage {
            ts: ts.into(),
            user: Some("U1".into()),
            bot_id: None,
            text: ts.into(),
        }
    }

    fn thread(n: usize) -> Vec<ThreadMessage> {
        (0..n).map(|i| message(&format!("1.{i:02}"))).collect()
    }

    fn ts<'a>(picked: &[&'a ThreadMessage]) -> Vec<&'a str> {
        picked.iter().map(|m| m.ts.as_str()).collect()
    }

    #[test]
    fn list_thread_keeps_the_first_message_and_the_latest() {
        let thread = thread(60);
        let (picked, left) = first_and_latest(&thread, 50);
        assert_eq!(picked.len(), 50);
        assert_eq!(
            left,
            LeftOut {
                earlier: 10,
                later: 0
            }
        );
        assert_eq!(picked[0].ts, "1.00");
        assert_eq!(picked[1].ts, "1.11");
        assert_eq!(picked[49].ts, "1.59");
        let (all, none) = first_and_latest(&thread[..50], 50);
        assert_eq!((all.len(), none), (50, LeftOut::default()));
    }

    #[test]
    fn read_post_keeps_the_linked_post_with_the_thread_around_it() {
        let thread = thread(60);
        for max in 1..=60 {
            for at in 0..60 {
                let (picked, left) = around(&thread, at, max);
                let shown = ts(&picked);
                assert_eq!(picked.len(), max, "max {max} at {at}");
                assert!(shown.contains(&thread[at].ts.as_str()), "max {max} at {at}");
                assert!(
                    shown.windows(2).all(|w| w[0] < w[1]),
                    "oldest first: {shown:?}"
                );
                assert_eq!(left.total(), 60 - max, "max {max} at {at}");
                if max >= 2 {
                    assert_eq!(shown[0], "1.00", "the first message, max {max} at {at}");
                }
            }
        }
        // Deep in a long thread: the first message, then 9 before the post
        // and 10 after it.
        let (picked, left) = around(&thread, 31, 20);
        let shown = ts(&picked);
        assert_eq!(shown[0], "1.00");
        assert_eq!(shown[1], "1.22");
        assert_eq!(shown[10], "1.31");
        assert_eq!(shown[19], "1.40");
        assert_eq!(
            left,
            LeftOut {
                earlier: 21,
                later: 19
            }
        );
        assert_eq!(left.note(), " (21 earlier and 19 later left out)");
        // Near the end, the window shifts back; near the start, forward.
        let (picked, left) = around(&thread, 59, 20);
        assert_eq!(ts(&picked)[1], "1.41");
        assert_eq!(
            left,
            LeftOut {
                earlier: 40,
                later: 0
            }
        );
        let (picked, left) = around(&thread, 2, 20);
        assert_eq!(ts(&picked)[..3], ["1.00", "1.01", "1.02"]);
        assert_eq!(left.note(), " (40 later left out)");
        // The first message linked: the messages after it.
        let (picked, _) = around(&thread, 0, 3);
        assert_eq!(ts(&picked), ["1.00", "1.01", "1.02"]);
        // Only the post.
        let (picked, _) = around(&thread, 30, 1);
        assert_eq!(ts(&picked), ["1.30"]);
        // A short thread whole.
        let (picked, left) = around(&thread[..5], 3, 20);
        assert_eq!((picked.len(), left), (5, LeftOut::default()));
    }
}
