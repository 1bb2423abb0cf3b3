//! `tenure lab --svg DIR`: one hand-written SVG per experiment with a size axis (mutex,
//! election, update, recovery), a small panel per measured series — the measured median
//! (a dot) and maximum (a cross) against n or k, beside the seed's figure (a dashed line,
//! two for a range). Rows are grouped into series by their name with the size taken out
//! (`"bully, n=8: best case"` → `"bully, n=·: best case"`); summary rows over a range of
//! sizes (`n=3…32`) and rows without a size are not plotted.

use tenure_sim::lab::Row;

const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 220.0;
const COLS: usize = 2;
/// Plot area inside a panel: left, top, right and bottom margins.
const M: (f64, f64, f64, f64) = (52.0, 34.0, 14.0, 36.0);

/// The size of a row (`n=8`, `k=3`) and its series name, if it has one.
pub fn size_of(what: &str) -> Option<(u64, String)> {
    let b = what.as_bytes();
    for i in 0..b.len().saturating_sub(2) {
        let boundary = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        if !(boundary && (b[i] == b'n' || b[i] == b'k') && b[i + 1] == b'=') {
            continue;
        }
        let digits: String = what[i + 2..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if digits.is_empty() {
            continue;
        }
        let rest = &what[i + 2 + digits.len()..];
        if rest.starts_with('…') {
            return None;
        }
        let series = format!("{}{}=·{}", &what[..i], b[i] as char, rest);
        return Some((digits.parse().ok()?, series));
    }
    None
}

/// The seed's figure as one value or a range: the text after the last `=`, a number,
/// `[a, b)` or `a to b`.
pub fn paper_values(paper: &str) -> Vec<f64> {
    let tail = paper.rsplit('=').next().unwrap_or(paper).trim();
    if let Ok(v) = tail.parse::<f64>() {
        return vec![v];
    }
    let inner = tail.trim_start_matches('[').trim_end_matches([')', ']']);
    let parts: Vec<&str> = if inner.contains(" to ") {
        inner.split(" to ").collect()
    } else {
        inner.split(',').collect()
    };
    let vs: Vec<f64> = parts.iter().filter_map(|p| p.trim().parse().ok()).collect();
    if vs.len() == parts.len() && !vs.is_empty() {
        vs
    } else {
        Vec::new()
    }
}

/// One plotted point.
struct Point {
    x: f64,
    median: f64,
    max: f64,
    paper: Vec<f64>,
}

/// Escape text for XML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round step for an axis spanning `span`.
fn step(span: f64) -> f64 {
    let raw = (span / 4.0).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn fmt(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The SVG for an experiment's rows, or `None` when no row has a size.
pub fn plot(title: &str, rows: &[Row]) -> Option<String> {
    let mut series: Vec<(String, Vec<Point>)> = Vec::new();
    for r in rows {
        let Some((n, name)) = size_of(&r.what) else {
            continue;
        };
        if r.median.is_nan() {
            continue;
        }
        let p = Point {
            x: n as f64,
            median: r.median,
            max: r.max,
            paper: paper_values(&r.paper),
        };
        match series.iter_mut().find(|(s, _)| *s == name) {
            Some((_, ps)) => ps.push(p),
            None => series.push((name, vec![p])),
        }
    }
    if series.is_empty() {
        return None;
    }
    let rows_n = series.len().div_ceil(COLS);
    let (w, h) = (PANEL_W * COLS as f64, 40.0 + PANEL_H * rows_n as f64 + 30.0);
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
        w / 2.0,
        esc(title)
    );
    // Legend.
    let ly = h - 14.0;
    s.push_str(&format!(
        "<g class=\"legend\"><circle cx=\"20\" cy=\"{ly}\" r=\"3\" fill=\"#1f5fbf\"/>\
<path d=\"M 14 {} l 12 0\" stroke=\"#1f5fbf\" stroke-width=\"2\"/><text x=\"32\" y=\"{}\">measured median</text>\
<path d=\"M 150 {} l 8 8 M 150 {} l 8 -8\" stroke=\"#c0392b\" stroke-width=\"1.5\"/><text x=\"164\" y=\"{}\">measured max</text>\
<path d=\"M 260 {ly} l 24 0\" stroke=\"#555\" stroke-dasharray=\"5,3\"/><text x=\"290\" y=\"{}\">paper</text></g>\n",
        ly,
        ly + 4.0,
        ly - 4.0,
        ly + 4.0,
        ly + 4.0,
        ly + 4.0
    ));
    for (i, (name, pts)) in series.iter().enumerate() {
        let ox = PANEL_W * (i % COLS) as f64;
        let oy = 40.0 + PANEL_H * (i / COLS) as f64;
        s.push_str(&panel(ox, oy, name, pts));
    }
    s.push_str("</svg>\n");
    Some(s)
}

fn panel(ox: f64, oy: f64, name: &str, pts: &[Point]) -> String {
    let (l, t, r, b) = M;
    let (pw, ph) = (PANEL_W - l - r, PANEL_H - t - b);
    let xs = pts.iter().map(|p| p.x);
    let (x0, x1) = (
        xs.clone().fold(f64::INFINITY, f64::min),
        xs.fold(f64::NEG_INFINITY, f64::max),
    );
    let (x0, x1) = if x1 > x0 {
        (x0, x1)
    } else {
        (x0 - 1.0, x1 + 1.0)
    };
    let ys = pts
        .iter()
        .flat_map(|p| [p.median, p.max].into_iter().chain(p.paper.iter().copied()))
        .filter(|v| v.is_finite());
    let y1 = ys.fold(0.0f64, f64::max);
    let ystep = step(if y1 > 0.0 { y1 } else { 1.0 });
    let y1 = (y1 / ystep).ceil().max(1.0) * ystep;
    let px = |x: f64| ox + l + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| oy + t + ph - y / y1 * ph;
    let mut s = format!(
        "<g class=\"panel\">\n<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">{}</text>\n",
        ox + PANEL_W / 2.0,
        oy + 18.0,
        esc(name)
    );
    // Axes, ticks, labels.
    s.push_str(&format!(
        "<path d=\"M {} {} L {} {} L {} {}\" fill=\"none\" stroke=\"black\"/>\n",
        ox + l,
        oy + t,
        ox + l,
        oy + t + ph,
        ox + l + pw,
        oy + t + ph
    ));
    let mut y = 0.0;
    while y <= y1 + ystep / 2.0 {
        s.push_str(&format!(
            "<path d=\"M {} {} l -4 0\" stroke=\"black\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
            ox + l,
            py(y),
            ox + l - 6.0,
            py(y) + 4.0,
            fmt(y)
        ));
        y += ystep;
    }
    let xstep = step(x1 - x0).max(1.0);
    let mut x = (x0 / xstep).ceil() * xstep;
    while x <= x1 {
        s.push_str(&format!(
            "<path d=\"M {} {} l 0 4\" stroke=\"black\"/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            px(x),
            oy + t + ph,
            px(x),
            oy + t + ph + 16.0,
            fmt(x)
        ));
        x += xstep;
    }
    let axis = if name.contains("k=·") { "k" } else { "n" };
    s.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{axis}</text>\n",
        ox + l + pw / 2.0,
        oy + t + ph + 30.0
    ));
    // The paper's line(s): one per bound, through the points that have one.
    let bounds = pts.iter().map(|p| p.paper.len()).max().unwrap_or(0);
    for j in 0..bounds {
        let d: Vec<String> = pts
            .iter()
            .filter_map(|p| p.paper.get(j).map(|v| (p.x, *v)))
            .enumerate()
            .map(|(i, (x, v))| format!("{} {} {}", if i == 0 { "M" } else { "L" }, px(x), py(v)))
            .collect();
        if !d.is_empty() {
            s.push_str(&format!(
                "<path class=\"paper\" d=\"{}\" fill=\"none\" stroke=\"#555\" stroke-dasharray=\"5,3\"/>\n",
                d.join(" ")
            ));
        }
    }
    // Measured: the medians joined, a dot each; the maxima as crosses.
    let line: Vec<String> = pts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                "{} {} {}",
                if i == 0 { "M" } else { "L" },
                px(p.x),
                py(p.median)
            )
        })
        .collect();
    s.push_str(&format!(
        "<path d=\"{}\" fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"1.5\"/>\n",
        line.join(" ")
    ));
    for p in pts {
        s.push_str(&format!(
            "<circle class=\"median\" cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"#1f5fbf\"/>\n",
            px(p.x),
            py(p.median)
        ));
        if p.max.is_finite() {
            let (cx, cy) = (px(p.x), py(p.max));
            s.push_str(&format!(
                "<path class=\"max\" d=\"M {} {} l 6 6 M {} {} l 6 -6\" stroke=\"#c0392b\" stroke-width=\"1.5\"/>\n",
                cx - 3.0,
                cy - 3.0,
                cx - 3.0,
                cy + 3.0
            ));
        }
    }
    s.push_str("</g>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_sim::lab::{Experiment, Scale, run};

    /// Well-formed enough for an SVG viewer: one root, every tag closed in order,
    /// attributes quoted, no stray `<` or `&` in text.
    fn well_formed(xml: &str) -> Result<(), String> {
        let body = xml
            .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
            .ok_or("no XML declaration")?;
        let mut stack: Vec<String> = Vec::new();
        let mut roots = 0;
        let mut rest = body;
        while let Some(i) = rest.find(['<', '&']) {
            let (text, tail) = rest.split_at(i);
            if text.contains('>') {
                return Err(format!("stray '>' in {text:?}"));
            }
            if tail.starts_with('&') {
                let end = tail.find(';').ok_or("unterminated entity")?;
                if !["&amp;", "&lt;", "&gt;", "&quot;"].contains(&&tail[..=end]) {
                    return Err(format!("unknown entity {}", &tail[..=end]));
                }
                rest = &tail[end + 1..];
                continue;
            }
            let end = tail.find('>').ok_or("unterminated tag")?;
            let tag = &tail[1..end];
            if tag.matches('"').count() % 2 != 0 {
                return Err(format!("unbalanced quotes in <{tag}>"));
            }
            if let Some(name) = tag.strip_prefix('/') {
                if stack.pop().as_deref() != Some(name) {
                    return Err(format!("</{name}> closes nothing open"));
                }
            } else {
                let name = tag
                    .split_whitespace()
                    .next()
                    .ok_or("empty tag")?
                    .trim_end_matches('/');
                if stack.is_empty() {
                    roots += 1;
                }
                if !tag.ends_with('/') {
                    stack.push(name.to_string());
                }
            }
            rest = &tail[end + 1..];
        }
        if !stack.is_empty() || roots != 1 {
            return Err(format!("open at the end: {stack:?}, roots {roots}"));
        }
        Ok(())
    }

    #[test]
    fn sizes_and_paper_figures_are_read_from_the_rows() {
        assert_eq!(
            size_of("bully, n=8: best case"),
            Some((8, "bully, n=·: best case".into()))
        );
        assert_eq!(
            size_of("C_updt, k=3: LC among the k sites (M per update)"),
            Some((3, "C_updt, k=·: LC among the k sites (M per update)".into()))
        );
        assert_eq!(size_of("ring, n=3…6: sizes matching 2(n−1)"), None);
        assert_eq!(size_of("runs breaking a lookup invariant"), None);
        assert_eq!(paper_values("(3k−1)M = 5"), vec![5.0]);
        assert_eq!(paper_values("[5n−4, 6n−6) = [11, 12)"), vec![11.0, 12.0]);
        assert_eq!(paper_values("0 to n−1 = 0 to 4"), vec![0.0, 4.0]);
        assert_eq!(paper_values("1 to ∞"), Vec::<f64>::new());
        assert_eq!(paper_values("3"), vec![3.0]);
    }

    // `tenure lab --svg`: each plot is well-formed XML with one dot per measured row
    // that has a size, and a max mark beside it.
    #[test]
    fn plots_are_well_formed_with_one_point_per_sized_row() {
        let scale = Scale::small(2);
        for e in [Experiment::Update, Experiment::Election, Experiment::Mutex] {
            let rows = run(e, &scale);
            let svg = plot(e.name(), &rows).expect("rows with sizes");
            well_formed(&svg).unwrap_or_else(|why| panic!("{}: {why}", e.name()));
            let sized = rows
                .iter()
                .filter(|r| size_of(&r.what).is_some() && !r.median.is_nan())
                .count();
            assert!(sized > 0);
            assert_eq!(svg.matches("<circle class=\"median\"").count(), sized);
            assert_eq!(svg.matches("<path class=\"max\"").count(), sized);
        }
        assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg><g></svg>").is_err());
        assert!(plot("lookup", &run(Experiment::Lookup, &scale)).is_none());
    }
}
