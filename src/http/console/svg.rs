//! The console's pictures: values in, an inline SVG string out (pure; issue 29).
//!
//! No script, no external font or stylesheet: text uses the page's font, colours are
//! fixed. Every label goes through [`esc`], so a task or identity name cannot become
//! markup. Each bar carries its exact value in `data-value` and a `<title>` tooltip, and
//! the number is also printed, so a reader (and a test) sees the figure, not only a
//! height.

use std::fmt::Write as _;

/// XML-escapes text for SVG element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One series of a bar chart (drawn side by side within each group).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// A CSS colour (fixed by the caller, never user text).
    pub colour: &'static str,
    /// One value per group, in group order.
    pub values: Vec<f64>,
}

/// A vertical bar chart: groups along x (days), one bar per series in each group.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// `id` of the `<svg>` element (ASCII; tests find the picture by it).
    pub id: String,
    pub title: String,
    /// Group labels (e.g. `11-28`); every `label_every`-th is printed.
    pub groups: Vec<String>,
    pub series: Vec<Series>,
    /// A horizontal reference line (a cost ceiling) and its label.
    pub line: Option<(f64, String)>,
    /// Formats a value for labels and tooltips (`$1.25`, `3`, `4m`).
    pub format: fn(f64) -> String,
    pub label_every: usize,
    /// Whether the legend prints each series' total (not for medians, which do not add).
    pub totals: bool,
}

const W: f64 = 360.0;
const H: f64 = 150.0;
const LEFT: f64 = 44.0;
const BOTTOM: f64 = 20.0;
const TOP: f64 = 34.0;

/// A round top for the y axis: 1, 2 or 5 times a power of ten, at least `max`.
pub fn nice_ceiling(max: f64) -> f64 {
    if !(max.is_finite()) || max <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    for step in [1.0, 2.0, 5.0, 10.0] {
        if step * magnitude >= max * 0.999_999 {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

/// Draws `chart` (pure).
pub fn bar_chart(chart: &BarChart) -> String {
    let groups = chart.groups.len().max(1);
    let mut max = chart
        .series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    if let Some((line, _)) = &chart.line {
        max = max.max(*line);
    }
    let top = nice_ceiling(max);
    let plot_w = W - LEFT - 6.0;
    let plot_h = H - TOP - BOTTOM;
    let y_of = |v: f64| TOP + plot_h - (v.max(0.0) / top) * plot_h;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg id=\"{}\" class=\"chart\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">\
         <title>{}</title>\
         <text x=\"0\" y=\"13\" class=\"ct\">{}</text>",
        esc(&chart.id),
        esc(&chart.title),
        esc(&chart.title),
        esc(&chart.title),
    );
    // Axis: 0 and the top value.
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#999\"/>\
         <text x=\"{lx}\" y=\"{b}\" class=\"ax\" text-anchor=\"end\">{zero}</text>\
         <text x=\"{lx}\" y=\"{t}\" class=\"ax\" text-anchor=\"end\">{topv}</text>",
        b = TOP + plot_h,
        r = W - 6.0,
        lx = LEFT - 3.0,
        t = TOP + 4.0,
        zero = esc(&(chart.format)(0.0)),
        topv = esc(&(chart.format)(top)),
    );
    let slot = plot_w / groups as f64;
    let nseries = chart.series.len().max(1);
    let bar_w = (slot * 0.8 / nseries as f64).max(1.0);
    for (g, label) in chart.groups.iter().enumerate() {
        let x0 = LEFT + slot * g as f64 + slot * 0.1;
        for (k, s) in chart.series.iter().enumerate() {
            let v = s.values.get(g).copied().unwrap_or(0.0);
            let v = if v.is_finite() { v } else { 0.0 };
            let y = y_of(v);
            let h = (TOP + plot_h - y).max(if v > 0.0 { 1.0 } else { 0.0 });
            let _ = write!(
                out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" data-series=\"{}\" data-group=\"{}\" data-value=\"{}\"><title>{} {}: {}</title></rect>",
                x0 + bar_w * k as f64,
                TOP + plot_h - h,
                bar_w,
                h,
                s.colour,
                esc(&s.name),
                esc(label),
                round4(v),
                esc(&s.name),
                esc(label),
                esc(&(chart.format)(v)),
            );
        }
        // Every `label_every`-th label, counted back from the last, which is always shown.
        if chart.label_every > 0 && (groups - 1 - g).is_multiple_of(chart.label_every) {
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{H}\" class=\"ax\" text-anchor=\"middle\">{}</text>",
                x0 + slot * 0.4,
                esc(label)
            );
        }
    }
    if let Some((line, label)) = &chart.line {
        let y = y_of(*line);
        let _ = write!(
            out,
            "<line class=\"ceiling\" x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{r}\" y2=\"{y:.1}\" stroke=\"#b3261e\" stroke-dasharray=\"4 3\" data-value=\"{v}\"/>\
             <text x=\"{r}\" y=\"{ty:.1}\" class=\"ax\" text-anchor=\"end\" fill=\"#b3261e\">{l}</text>",
            r = W - 6.0,
            ty = (y - 3.0).max(TOP - 2.0),
            v = round4(*line),
            l = esc(label),
        );
    }
    // A legend with each series' total, under the title, so the figure is readable
    // without hovering.
    let mut x = 0.0;
    for s in &chart.series {
        let total: f64 = s.values.iter().filter(|v| v.is_finite()).sum();
        let text = if chart.totals {
            format!("{} {}", s.name, (chart.format)(total))
        } else {
            s.name.clone()
        };
        let _ = write!(
            out,
            "<rect x=\"{x:.1}\" y=\"18\" width=\"8\" height=\"8\" fill=\"{}\"/><text x=\"{:.1}\" y=\"26\" class=\"ax lg\" data-total=\"{}\">{}</text>",
            s.colour,
            x + 11.0,
            round4(total),
            esc(&text)
        );
        x += 16.0 + 6.5 * text.chars().count() as f64;
    }
    out.push_str("</svg>");
    out
}

/// One row of a horizontal bar list (per agent: success rate, median time).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    /// 0..=1 of the bar's length.
    pub fraction: f64,
    /// The text printed after the bar.
    pub text: String,
    pub colour: &'static str,
}

/// A list of horizontal bars, one row each (pure).
pub fn row_chart(id: &str, title: &str, rows: &[Row]) -> String {
    let row_h = 22.0;
    let h = TOP + row_h * rows.len().max(1) as f64 + 4.0;
    let bar_x = 90.0;
    let bar_w = 120.0;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg id=\"{}\" class=\"chart\" viewBox=\"0 0 {W} {h}\" role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\"><title>{}</title>\
         <text x=\"0\" y=\"13\" class=\"ct\">{}</text>",
        esc(id),
        esc(title),
        esc(title),
        esc(title)
    );
    if rows.is_empty() {
        let _ = write!(
            out,
            "<text x=\"0\" y=\"{}\" class=\"ax\">no finished attempts yet</text>",
            TOP + 14.0
        );
    }
    for (i, r) in rows.iter().enumerate() {
        let y = TOP + row_h * i as f64;
        let f = if r.fraction.is_finite() {
            r.fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let _ = write!(
            out,
            "<g class=\"row\" data-label=\"{l}\"><text x=\"0\" y=\"{ty:.1}\" class=\"ax\">{l}</text>\
             <rect x=\"{bar_x}\" y=\"{y:.1}\" width=\"{bar_w}\" height=\"14\" fill=\"#eee\"/>\
             <rect x=\"{bar_x}\" y=\"{y:.1}\" width=\"{fw:.1}\" height=\"14\" fill=\"{c}\" data-value=\"{fv}\"/>\
             <text x=\"{tx}\" y=\"{ty:.1}\" class=\"ax\">{t}</text></g>",
            l = esc(&r.label),
            ty = y + 11.0,
            fw = bar_w * f,
            c = r.colour,
            fv = round4(f),
            tx = bar_x + bar_w + 6.0,
            t = esc(&r.text),
        );
    }
    out.push_str("</svg>");
    out
}

/// A value as a short decimal for `data-value` (no float noise like 0.30000000000000004).
fn round4(v: f64) -> String {
    let s = format!("{:.4}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dollars(v: f64) -> String {
        format!("${v:.2}")
    }

    fn chart() -> BarChart {
        BarChart {
            id: "cost-demo-7".into(),
            title: "demo: cost per day <7 days>".into(),
            groups: vec!["11-29".into(), "11-30".into(), "12-01".into()],
            series: vec![Series {
                name: "demo".into(),
                colour: "#1a56db",
                values: vec![0.5, 0.0, 2.25],
            }],
            line: Some((2.0, "ceiling $2.00".into())),
            format: dollars,
            label_every: 1,
            totals: true,
        }
    }

    #[test]
    fn nice_ceilings() {
        for (max, want) in [
            (0.0, 1.0),
            (-3.0, 1.0),
            (f64::NAN, 1.0),
            (0.3, 0.5),
            (1.0, 1.0),
            (1.2, 2.0),
            (2.25, 5.0),
            (7.0, 10.0),
            (10.0, 10.0),
            (11.0, 20.0),
            (420.0, 500.0),
        ] {
            assert_eq!(nice_ceiling(max), want, "{max}");
        }
    }

    #[test]
    fn bars_carry_their_values_and_heights_scale_to_the_axis() {
        let svg = bar_chart(&chart());
        assert!(svg.starts_with("<svg id=\"cost-demo-7\""), "{svg}");
        assert!(svg.ends_with("</svg>"));
        // One rect per value, each with its exact value.
        assert!(
            svg.contains("data-group=\"11-29\" data-value=\"0.5\""),
            "{svg}"
        );
        assert!(
            svg.contains("data-group=\"11-30\" data-value=\"0\""),
            "{svg}"
        );
        assert!(
            svg.contains("data-group=\"12-01\" data-value=\"2.25\""),
            "{svg}"
        );
        // The axis tops at 5 (the ceiling 2 and the max 2.25 both fit), printed as money.
        assert!(svg.contains(">$5.00</text>"), "{svg}");
        // 2.25 of 5 over a plot of 96 px is 43.2 px high; 0 draws nothing.
        assert!(
            svg.contains(
                "height=\"43.2\" fill=\"#1a56db\" data-series=\"demo\" data-group=\"12-01\""
            ),
            "{svg}"
        );
        assert!(
            svg.contains(
                "height=\"0.0\" fill=\"#1a56db\" data-series=\"demo\" data-group=\"11-30\""
            ),
            "{svg}"
        );
        // The ceiling line at 2 and the legend's total.
        assert!(svg.contains("class=\"ceiling\""), "{svg}");
        assert!(svg.contains("data-value=\"2\"/>"), "{svg}");
        assert!(
            svg.contains("data-total=\"2.75\">demo $2.75</text>"),
            "{svg}"
        );
        // The title is text, never markup.
        assert!(svg.contains("cost per day &lt;7 days&gt;"), "{svg}");
        assert!(!svg.contains("<7 days>"));
        assert!(!svg.contains("<script"));
    }

    #[test]
    fn hostile_labels_stay_text() {
        let mut c = chart();
        c.series[0].name = "<script>x</script>\"".into();
        c.groups[0] = "a&b".into();
        let svg = bar_chart(&c);
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(
            svg.contains("&lt;script&gt;x&lt;/script&gt;&quot;"),
            "{svg}"
        );
        assert!(svg.contains("a&amp;b"), "{svg}");
        let rows = row_chart(
            "agents",
            "per agent",
            &[Row {
                label: "<b>".into(),
                fraction: 2.0,
                text: "x".into(),
                colour: "#137333",
            }],
        );
        assert!(rows.contains("&lt;b&gt;"), "{rows}");
        // A fraction above 1 is drawn full, not past the track.
        assert!(
            rows.contains("width=\"120.0\" height=\"14\" fill=\"#137333\" data-value=\"1\""),
            "{rows}"
        );
    }

    #[test]
    fn rows_show_fraction_and_text() {
        let svg = row_chart(
            "agents",
            "Success rate per agent",
            &[
                Row {
                    label: "claude".into(),
                    fraction: 0.75,
                    text: "75% of 4 · median 3m 10s".into(),
                    colour: "#137333",
                },
                Row {
                    label: "codex".into(),
                    fraction: 0.0,
                    text: "0% of 1".into(),
                    colour: "#137333",
                },
            ],
        );
        assert!(svg.contains("data-label=\"claude\""), "{svg}");
        assert!(
            svg.contains("width=\"90.0\" height=\"14\" fill=\"#137333\" data-value=\"0.75\""),
            "{svg}"
        );
        assert!(svg.contains(">75% of 4 · median 3m 10s</text>"), "{svg}");
        assert!(svg.contains("data-value=\"0\""), "{svg}");
        assert!(row_chart("e", "t", &[]).contains("no finished attempts yet"));
    }

    #[test]
    fn values_round_without_float_noise() {
        assert_eq!(round4(0.1 + 0.2), "0.3");
        assert_eq!(round4(0.0), "0");
        assert_eq!(round4(-0.0), "0");
        assert_eq!(round4(12.0), "12");
        assert_eq!(round4(1.23456), "1.2346");
    }
}
