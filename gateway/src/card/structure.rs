//! The card's structure, once its elements are read: the order of the
//! document, each element listed once by one parent, no cycles, every
//! element reachable from the root, the nesting rules (the root a Card,
//! Field in Fields) and the card-wide counts of tables, charts and fields.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::limits::{MAX_CHARTS, MAX_FIELDS, MAX_TABLES};
use super::problem::Problem;
use super::vocabulary::{Element, Kind};

/// The elements in document order (a preorder walk from the root, then the
/// elements the walk does not reach), and the set reached from the root.
pub(super) fn document_order<'a>(
    root: Option<&'a str>,
    elements: &BTreeMap<&'a str, Element>,
) -> (Vec<&'a str>, HashSet<&'a str>) {
    let mut order = Vec::with_capacity(elements.len());
    let mut seen: HashSet<&str> = HashSet::new();
    let mut stack: Vec<&str> = root.into_iter().collect();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        order.push(id);
        if let Some(element) = elements.get(id) {
            for child in element.children.iter().rev() {
                if let Some((key, _)) = elements.get_key_value(child.as_str())
                    && !seen.contains(key)
                {
                    stack.push(key);
                }
            }
        }
    }
    let reachable = seen.clone();
    for id in elements.keys() {
        if !seen.contains(id) {
            order.push(id);
        }
    }
    (order, reachable)
}

/// Children, parents, cycles, reachability and nesting rules.
pub(super) fn check_structure(
    root: Option<&str>,
    root_id: Option<&str>,
    order: &[&str],
    reachable: &HashSet<&str>,
    elements: &BTreeMap<&str, Element>,
    problems: &mut Vec<Problem>,
) {
    let mut push = |element: &str, field: &str, message: String| {
        problems.push(Problem::new(element, field, message));
    };
    let kind_of = |id: &str| elements.get(id).and_then(|e| e.kind);

    // Each element once: one parent, listed once; the root nobody's child.
    let mut parent: HashMap<&str, &str> = HashMap::new();
    for &id in order {
        let Some(element) = elements.get(id) else {
            continue;
        };
        for child in &element.children {
            let child = child.as_str();
            if root == Some(child) {
                push(
                    id,
                    "children",
                    format!("{child:?} is the root; the root cannot be a child"),
                );
                continue;
            }
            let Some((&key, _)) = elements.get_key_value(child) else {
                push(id, "children", format!("{child:?} is not in elements"));
                continue;
            };
            match parent.get(key) {
                Some(&p) if p == id => push(
                    id,
                    "children",
                    format!(
                        "lists {child:?} more than once; each element appears once in the card"
                    ),
                ),
                Some(&p) => push(
                    id,
                    "children",
                    format!(
                        "{child:?} is already a child of {p:?}; each element appears once in \
                         the card"
                    ),
                ),
                None => {
                    parent.insert(key, id);
                }
            }
        }
    }

    for (at, path) in find_cycles(order, elements) {
        let path: Vec<String> = path.iter().map(|id| format!("{id:?}")).collect();
        push(
            at,
            "children",
            format!(
                "cycle {}; an element cannot contain itself",
                path.join(" -> ")
            ),
        );
    }

    if let Some(root_id) = root_id {
        for &id in order {
            if !reachable.contains(id) {
                push(
                    id,
                    "id",
                    format!(
                        "not reachable from the root {root_id:?}; list it in the children of \
                         the Card (a Field: of a Fields) or remove it"
                    ),
                );
            }
        }
        if let Some(kind) = kind_of(root_id)
            && kind != Kind::Card
        {
            push(
                root_id,
                "type",
                format!("the root must be a Card, got {}", kind.name()),
            );
        }
    }

    for &id in order {
        let Some(element) = elements.get(id) else {
            continue;
        };
        match element.kind {
            Some(Kind::Card) if root_id.is_some() && root_id != Some(id) => push(
                id,
                "type",
                format!(
                    "a Card can only be the root (the root is {:?})",
                    root_id.unwrap_or_default()
                ),
            ),
            Some(Kind::Field) => {
                if let Some(&p) = parent.get(id)
                    && let Some(parent_kind) = kind_of(p)
                    && parent_kind != Kind::Fields
                {
                    push(
                        id,
                        "type",
                        format!(
                            "a Field must be a child of a Fields element, not of {} ({p:?})",
                            parent_kind.a()
                        ),
                    );
                }
            }
            Some(Kind::Fields) => {
                if element.children.is_empty() {
                    push(
                        id,
                        "children",
                        format!("no children; Fields needs 1 to {MAX_FIELDS} Field children"),
                    );
                }
                for child in &element.children {
                    if let Some(kind) = kind_of(child)
                        && kind != Kind::Field
                    {
                        push(
                            id,
                            "children",
                            format!(
                                "{child:?} is {}; Fields takes only Field children",
                                kind.a()
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
    }
}

/// Every cycle found by a depth-first walk: the element whose children
/// close it, and the path from the repeated element back to itself.
fn find_cycles<'a>(
    order: &[&'a str],
    elements: &BTreeMap<&'a str, Element>,
) -> Vec<(&'a str, Vec<&'a str>)> {
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        OnPath,
        Done,
    }
    let mut colour: HashMap<&str, Colour> = HashMap::new();
    let mut cycles = Vec::new();
    for &start in order {
        if colour.contains_key(start) {
            continue;
        }
        colour.insert(start, Colour::OnPath);
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        while let Some(top) = stack.last_mut() {
            let (id, next) = *top;
            let children = elements
                .get(id)
                .map(|e| e.children.as_slice())
                .unwrap_or(&[]);
            if next >= children.len() {
                colour.insert(id, Colour::Done);
                stack.pop();
                continue;
            }
            top.1 += 1;
            let Some((&child, _)) = elements.get_key_value(children[next].as_str()) else {
                continue;
            };
            match colour.get(child) {
                None => {
                    colour.insert(child, Colour::OnPath);
                    stack.push((child, 0));
                }
                Some(Colour::OnPath) => {
                    let from = stack.iter().position(|(s, _)| *s == child).unwrap_or(0);
                    let mut path: Vec<&str> = stack[from..].iter().map(|(s, _)| *s).collect();
                    path.push(child);
                    cycles.push((id, path));
                }
                Some(Colour::Done) => {}
            }
        }
    }
    cycles
}

/// Card-wide counts: tables, charts, fields.
pub(super) fn check_counts(
    counted: &[&str],
    elements: &BTreeMap<&str, Element>,
    problems: &mut Vec<Problem>,
) {
    let kind_of = |id: &str| elements.get(id).and_then(|e| e.kind);
    let mut tables = 0;
    let mut charts = 0;
    for &id in counted {
        match kind_of(id) {
            Some(Kind::Table) => {
                tables += 1;
                if tables > MAX_TABLES {
                    problems.push(Problem::new(
                        id,
                        "type",
                        format!("{tables} tables in the card, at most {MAX_TABLES}"),
                    ));
                }
            }
            Some(Kind::Chart) => {
                charts += 1;
                if charts > MAX_CHARTS {
                    problems.push(Problem::new(
                        id,
                        "type",
                        format!("{charts} charts in the card, at most {MAX_CHARTS}"),
                    ));
                }
            }
            _ => {}
        }
    }
    // Fields: counted where they are listed, so the problem names the Fields
    // element holding the first field past the limit.
    let mut total = 0;
    let mut first_over: Option<&str> = None;
    for &id in counted {
        let Some(element) = elements.get(id) else {
            continue;
        };
        if element.kind != Some(Kind::Fields) {
            continue;
        }
        for child in &element.children {
            if kind_of(child) == Some(Kind::Field) {
                total += 1;
                if total == MAX_FIELDS + 1 {
                    first_over = Some(id);
                }
            }
        }
    }
    if let Some(id) = first_over {
        problems.push(Problem::new(
            id,
            "children",
            format!("{total} fields in the card, at most {MAX_FIELDS}"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use crate::card::test_cards::*;

    #[test]
    fn cycles_are_reported() {
        let spec = json!({
            "root": "card",
            "elements": {
                "card": {"type": "Card", "children": ["a", "card"]},
                "a": {"type": "Fields", "children": ["b"]},
                "b": {"type": "Fields", "children": ["a"]},
                "x": {"type": "Fields", "children": ["y"]},
                "y": {"type": "Fields", "children": ["x"]},
                "s": {"type": "Fields", "children": ["s"]}
            }
        });
        let got = problems(&spec);
        assert_has(
            &got,
            r#"element "card" field "children": cycle "card" -> "card"; an element cannot contain itself"#,
        );
        assert_has(
            &got,
            r#"element "b" field "children": cycle "a" -> "b" -> "a"; an element cannot contain itself"#,
        );
        assert_has(
            &got,
            r#"element "y" field "children": cycle "x" -> "y" -> "x"; an element cannot contain itself"#,
        );
        assert_has(
            &got,
            r#"element "s" field "children": cycle "s" -> "s"; an element cannot contain itself"#,
        );
        assert_has(
            &got,
            r#"element "card" field "children": "card" is the root; the root cannot be a child"#,
        );
        assert_has(
            &got,
            r#"element "b" field "children": "a" is already a child of "card"; each element appears once in the card"#,
        );
        assert_has(
            &got,
            r#"element "x" field "id": not reachable from the root "card"; list it in the children of the Card (a Field: of a Fields) or remove it"#,
        );
    }

    #[test]
    fn a_deep_chain_does_not_overflow_the_stack() {
        let mut elements = Map::new();
        for i in 0..20_000 {
            elements.insert(
                format!("e{i}"),
                json!({"type": "Fields", "children": [format!("e{}", i + 1)]}),
            );
        }
        elements.insert(
            "e20000".into(),
            json!({"type": "Fields", "children": ["e0"]}),
        );
        let spec = card(&["e0"], Value::Object(elements));
        let got = problems(&spec);
        assert!(got.iter().any(|p| p.contains("cycle \"e0\" -> \"e1\"")));
    }

    #[test]
    fn listing_a_child_twice_is_reported() {
        let got = problems(&card(&["d", "d"], json!({"d": {"type": "Divider"}})));
        assert_eq!(
            got,
            [
                r#"element "card" field "children": lists "d" more than once; each element appears once in the card"#
            ]
        );
    }
}
