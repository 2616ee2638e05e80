//! The card's vocabulary: the element types ([`Kind`]) with their props,
//! and what an element is once read ([`Element`], [`Node`]), leniently, so
//! that a card with problems can still be rendered to count its blocks.

use serde_json::Number;

use super::problem::Problem;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Card,
    Fields,
    Field,
    Heading,
    Text,
    Table,
    Chart,
    Button,
    Divider,
    Image,
}

pub(super) const KINDS: [Kind; 10] = [
    Kind::Card,
    Kind::Fields,
    Kind::Field,
    Kind::Heading,
    Kind::Text,
    Kind::Table,
    Kind::Chart,
    Kind::Button,
    Kind::Divider,
    Kind::Image,
];

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Card => "Card",
            Kind::Fields => "Fields",
            Kind::Field => "Field",
            Kind::Heading => "Heading",
            Kind::Text => "Text",
            Kind::Table => "Table",
            Kind::Chart => "Chart",
            Kind::Button => "Button",
            Kind::Divider => "Divider",
            Kind::Image => "Image",
        }
    }

    pub(super) fn parse(name: &str) -> Option<Kind> {
        KINDS.into_iter().find(|kind| kind.name() == name)
    }

    pub(super) fn props(self) -> &'static [&'static str] {
        match self {
            Kind::Card => &["title"],
            Kind::Fields | Kind::Divider => &[],
            Kind::Field => &["label", "value"],
            Kind::Heading | Kind::Text => &["text"],
            Kind::Table => &["columns", "rows"],
            Kind::Chart => &["kind", "title", "series"],
            Kind::Button => &["text", "url"],
            Kind::Image => &["url", "alt"],
        }
    }

    pub(super) fn takes_children(self) -> bool {
        matches!(self, Kind::Card | Kind::Fields)
    }

    /// "a Card", "an Image".
    pub(super) fn a(self) -> String {
        match self {
            Kind::Image => "an Image".to_owned(),
            other => format!("a {}", other.name()),
        }
    }

    /// "no props", "title", "label and value", "kind, title and series".
    pub(super) fn props_list(self) -> String {
        match self.props() {
            [] => "no props".to_owned(),
            [one] => (*one).to_owned(),
            [init @ .., last] => format!("{} and {last}", init.join(", ")),
        }
    }
}

pub(super) fn type_list() -> String {
    KINDS.map(Kind::name).join(", ")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChartKind {
    Bar,
    Line,
    Area,
    Pie,
}

impl ChartKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            ChartKind::Bar => "bar",
            ChartKind::Line => "line",
            ChartKind::Area => "area",
            ChartKind::Pie => "pie",
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Chart {
    pub(super) kind: ChartKind,
    pub(super) title: String,
    pub(super) series: Vec<Series>,
}

#[derive(Debug, Clone)]
pub(super) struct Series {
    pub(super) name: String,
    pub(super) points: Vec<(String, Number)>,
}

/// An element's content, read leniently (defaults where a prop is wrong)
/// so that a card with problems can still be rendered to count its blocks.
#[derive(Debug, Clone)]
pub(super) enum Node {
    Card {
        title: Option<String>,
    },
    Fields,
    Field {
        label: String,
        value: String,
    },
    Heading {
        text: String,
    },
    Text {
        text: String,
    },
    Table {
        columns: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    Chart(Chart),
    Button {
        text: String,
        url: String,
    },
    Divider,
    Image {
        url: String,
        alt: String,
    },
}

#[derive(Debug)]
pub(super) struct Element {
    pub(super) kind: Option<Kind>,
    pub(super) node: Option<Node>,
    pub(super) children: Vec<String>,
    pub(super) problems: Vec<Problem>,
}
