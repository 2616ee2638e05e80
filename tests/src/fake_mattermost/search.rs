//! `POST /teams/{team_id}/posts/search` (`posts.yaml`): `terms`,
//! `is_or_search`, `page`, `per_page`; `time_zone_offset` and
//! `include_deleted_channels` are taken and ignored.
//!
//! Like Mattermost (`SearchPostsInTeamForUser`), the search covers only
//! channels the searcher is a member of: the team's channels it joined and
//! its D and G channels. A public channel it has not joined is not
//! searched, though it could read it. Terms:
//!
//! - words, separated by spaces: each must appear as a whole word, in any
//!   case (any one of them with `is_or_search`); `word*` matches a prefix;
//! - `"a quoted phrase"`: those words, in that order, next to each other;
//! - `-word`: posts holding it are left out;
//! - `from:username` and `in:channel-name` (the name, not the display
//!   name): only that author, only that channel.
//!
//! Mattermost's database search also stems words (Postgres full-text
//! search); the fake does not. Results are newest first, `per_page` 60 by
//! default, at most 200, with `matches: null` (no Elasticsearch).

use http::StatusCode;
use serde_json::Value;

use super::answers::{AppError, Outcome};
use super::state::{Cursors, DEFAULT_PER_PAGE, MAX_PER_PAGE, State};

/// Parsed search terms.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Terms {
    pub words: Vec<String>,
    pub phrases: Vec<Vec<String>>,
    pub excluded: Vec<String>,
    pub from: Vec<String>,
    pub within: Vec<String>,
}

impl Terms {
    pub fn parse(terms: &str) -> Terms {
        let mut parsed = Terms::default();
        let mut rest = terms.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('"') {
                let (phrase, tail) = after.split_once('"').unwrap_or((after, ""));
                let words = words_of(phrase);
                if !words.is_empty() {
                    parsed.phrases.push(words);
                }
                rest = tail.trim_start();
                continue;
            }
            let (token, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            rest = tail.trim_start();
            let lower = token.to_lowercase();
            if let Some(user) = lower.strip_prefix("from:") {
                parsed.from.push(user.trim_start_matches('@').to_string());
            } else if let Some(channel) = lower.strip_prefix("in:") {
                parsed
                    .within
                    .push(channel.trim_start_matches('~').to_string());
            } else if let Some(word) = lower.strip_prefix('-') {
                parsed.excluded.extend(words_of(word));
            } else if lower.ends_with('*') {
                parsed.words.push(lower);
            } else {
                parsed.words.extend(words_of(&lower));
            }
        }
        parsed
    }

    fn is_empty(&self) -> bool {
        self.words.is_empty()
            && self.phrases.is_empty()
            && self.from.is_empty()
            && self.within.is_empty()
    }

    /// Whether a message (its words) matches the words and phrases.
    pub fn matches(&self, message: &str, or: bool) -> bool {
        let words = words_of(message);
        let has_word = |word: &String| match word.strip_suffix('*') {
            Some(prefix) => words.iter().any(|w| w.starts_with(prefix)),
            None => words.contains(word),
        };
        let has_phrase =
            |phrase: &Vec<String>| words.windows(phrase.len()).any(|w| w == phrase.as_slice());
        if self.excluded.iter().any(has_word) {
            return false;
        }
        let mut found = self
            .words
            .iter()
            .map(has_word)
            .chain(self.phrases.iter().map(has_phrase));
        if self.words.is_empty() && self.phrases.is_empty() {
            true
        } else if or {
            found.any(|hit| hit)
        } else {
            found.all(|hit| hit)
        }
    }
}

/// Lowercase words: runs of letters, digits and `_`.
fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

pub(crate) fn search(state: &State, caller: &str, team_id: &str, body: &Value) -> Outcome {
    if team_id != state.team.id {
        return Err(AppError::permissions("view_team"));
    }
    let terms = body
        .get("terms")
        .and_then(Value::as_str)
        .ok_or_else(|| AppError::invalid_body("terms"))?;
    let or = body
        .get("is_or_search")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let number = |name: &str| body.get(name).and_then(Value::as_u64).map(|n| n as usize);
    let page = number("page").unwrap_or(0);
    let per_page = number("per_page")
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_PER_PAGE)
        .min(MAX_PER_PAGE);
    let terms = Terms::parse(terms);
    let mut hits: Vec<String> = Vec::new();
    if !terms.is_empty() {
        for post in state.posts.iter().rev() {
            let Some(channel) = state.channel(&post.channel_id) else {
                continue;
            };
            let author = state.user(&post.user_id).map(|u| u.username.to_lowercase());
            let searched = channel.is_member(caller)
                && (terms.from.is_empty() || author.is_some_and(|a| terms.from.contains(&a)))
                && (terms.within.is_empty() || terms.within.contains(&channel.name.to_lowercase()));
            if searched && terms.matches(&post.message, or) {
                hits.push(post.id.clone());
            }
        }
    }
    let start = (page * per_page).min(hits.len());
    let end = (start + per_page).min(hits.len());
    let cursors = Cursors {
        has_next: end < hits.len(),
        ..Cursors::default()
    };
    let mut list = state.post_list(&hits[start..end], &[], cursors);
    list["matches"] = Value::Null;
    Ok((StatusCode::OK, list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_split_into_words_phrases_and_filters() {
        let terms = Terms::parse(r#"Deploy "green build" from:Ada in:town-square -flaky log*"#);
        assert_eq!(terms.words, vec!["deploy", "log*"]);
        assert_eq!(
            terms.phrases,
            vec![vec!["green".to_string(), "build".to_string()]]
        );
        assert_eq!(terms.from, vec!["ada"]);
        assert_eq!(terms.within, vec!["town-square"]);
        assert_eq!(terms.excluded, vec!["flaky"]);
    }

    #[test]
    fn words_match_whole_and_phrases_in_order() {
        let terms = Terms::parse(r#"deploy "green build""#);
        assert!(terms.matches("Deploy: the GREEN build passed", false));
        assert!(!terms.matches("deployment of the green build", false));
        assert!(!terms.matches("deploy the build, green", false));
        assert!(terms.matches("deploy the build, green", true));
        assert!(Terms::parse("dep*").matches("deployment", false));
        assert!(!Terms::parse("deploy -flaky").matches("deploy flaky", false));
    }
}
