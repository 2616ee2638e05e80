//! Charts: their kinds, series and points.

use serde_json::Number;

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
