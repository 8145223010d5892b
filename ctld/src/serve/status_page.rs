//! The read-only status page ctld serves at `/`: GPU-hours per team over the last 24 hours as a
//! stacked bar chart (inline SVG, no script), GPUs per team now (allocated and borrowed), the queue
//! by team, and the nodes with their states. Rendered on the server from the core's snapshot and
//! the hourly rollups; it refreshes itself every 30 seconds.

use crate::core::metrics::Snapshot;
use drover_shared::UnixTime;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Hours the chart covers.
const HOURS: i64 = 24;

/// `(hour, account, GPU-seconds, borrowed GPU-seconds)` of the last [`HOURS`] hours.
pub(crate) fn recent_hours(path: &Path, now: UnixTime) -> Vec<(UnixTime, String, u64, u64)> {
    let read = || -> Result<Vec<_>, Box<dyn std::error::Error>> {
        let conn = crate::store::db::open(path, true)?;
        let mut stmt = conn.prepare(
            "SELECT hour, account, SUM(gpu_secs), SUM(borrowed_gpu_secs) FROM usage_hourly
             WHERE gpu_type = '' AND hour >= ?1 GROUP BY hour, account ORDER BY hour, account",
        )?;
        let first = now - now.rem_euclid(3600) - (HOURS - 1) * 3600;
        let rows = stmt.query_map([first], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
            ))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    };
    read().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "status page: reading hourly usage failed");
        Vec::new()
    })
}

fn esc(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A fixed colour per team (by position in the sorted team list).
const COLOURS: [&str; 8] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"];

/// The page.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn render(cluster: &str, snap: &Snapshot, hours: &[(UnixTime, String, u64, u64)], now: UnixTime) -> String {
    let mut teams: Vec<String> = hours.iter().map(|h| h.1.clone()).collect();
    teams.extend(snap.gpus_allocated.keys().map(|(a, _)| a.clone()));
    teams.extend(snap.pending_by_account.keys().cloned());
    teams.sort();
    teams.dedup();
    let colour = |team: &str| COLOURS[teams.iter().position(|t| t == team).unwrap_or(0) % COLOURS.len()];
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"30\">\
         <title>{c} – Drover status</title><style>body{{font-family:sans-serif;margin:1.5em;color:#222}}\
         table{{border-collapse:collapse;margin-bottom:1.5em}}td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:right}}\
         th{{background:#f3f3f3}}td:first-child,th:first-child{{text-align:left}}.legend span{{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em}}</style></head><body>\n\
         <h1>{c}</h1>\n<p>{n} nodes, {g} GPUs, {a} of {t} CPUs allocated, {p} jobs pending.</p>\n",
        c = esc(cluster),
        n = snap.nodes.len(),
        g = snap.gpus_total,
        a = snap.cpus_allocated,
        t = snap.cpus_total,
        p = snap.backlog,
    );

    // The chart: one bar per hour, stacked by team, height in GPU-hours.
    let first = now - now.rem_euclid(3600) - (HOURS - 1) * 3600;
    let mut per_hour: BTreeMap<i64, Vec<(&str, f64)>> = BTreeMap::new();
    for (hour, team, secs, _) in hours {
        per_hour.entry((hour - first) / 3600).or_default().push((team, *secs as f64 / 3600.0));
    }
    let tallest = per_hour.values().map(|v| v.iter().map(|(_, h)| h).sum::<f64>()).fold(0.0, f64::max);
    let top = axis_top(tallest);
    let (left, height, bar) = (50.0, 200.0, 20.0);
    let width = 24 * 26 + 50;
    let _ = writeln!(out, "<h2>GPU-hours per team, last 24 hours</h2>");
    let _ = writeln!(
        out,
        "<svg id=\"gpu-chart\" width=\"{width}\" height=\"230\" role=\"img\" aria-label=\"GPU-hours per team per hour\">"
    );
    // The axis: its top, its middle (a faint line) and 0, labelled in GPU-hours.
    let middle = 10.0 + (height - 10.0) / 2.0;
    let _ = writeln!(
        out,
        "<line x1=\"45\" y1=\"{height}\" x2=\"{width}\" y2=\"{height}\" stroke=\"#888\"/>\
         <line x1=\"45\" y1=\"10\" x2=\"{width}\" y2=\"10\" stroke=\"#ddd\"/>\
         <line x1=\"45\" y1=\"{middle}\" x2=\"{width}\" y2=\"{middle}\" stroke=\"#eee\"/>\
         <text class=\"axis-top\" x=\"0\" y=\"14\" font-size=\"11\">{}</text>\
         <text x=\"0\" y=\"{}\" font-size=\"11\">{}</text><text x=\"0\" y=\"{height}\" font-size=\"11\">0</text>",
        axis_label(top),
        middle + 4.0,
        axis_label(top / 2.0)
    );
    for (slot, stack) in &per_hour {
        let x = left + *slot as f64 * 26.0;
        let mut y = height;
        for (team, value) in stack {
            let h = value / top * (height - 10.0);
            y -= h;
            let _ = writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bar}\" height=\"{h:.1}\" fill=\"{}\"><title>{}: {value:.4} GPU-hours</title></rect>",
                colour(team),
                esc(team)
            );
        }
    }
    for slot in (0..HOURS).step_by(6) {
        let hour = (first + slot * 3600).rem_euclid(86_400) / 3600;
        let _ = writeln!(out, "<text x=\"{}\" y=\"220\" font-size=\"11\">{hour:02}:00</text>", 50 + slot * 26);
    }
    let _ = writeln!(out, "</svg>");
    let _ = write!(out, "<p class=\"legend\">");
    for team in &teams {
        let _ = write!(out, "<span style=\"background:{}\"></span>{}", colour(team), esc(team));
    }
    let _ = writeln!(out, "</p>");

    // Per team now.
    let _ = writeln!(
        out,
        "<h2>Teams now</h2>\n<table id=\"teams\"><tr><th>Team</th><th>GPUs allocated</th><th>GPUs borrowed</th><th>Jobs pending</th><th>GPU-hours (24 h)</th></tr>"
    );
    for team in &teams {
        let sum =
            |m: &BTreeMap<(String, String), u64>| m.iter().filter(|((a, _), _)| a == team).map(|(_, n)| n).sum::<u64>();
        let day: u64 = hours.iter().filter(|h| &h.1 == team).map(|h| h.2).sum();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td></tr>",
            esc(team),
            sum(&snap.gpus_allocated),
            sum(&snap.gpus_borrowed),
            snap.pending_by_account.get(team).copied().unwrap_or(0),
            day as f64 / 3600.0
        );
    }
    let _ = writeln!(out, "</table>");

    // Nodes.
    let _ = writeln!(out, "<h2>Nodes</h2>\n<table id=\"nodes\"><tr><th>Node</th><th>State</th></tr>");
    for (node, state, drained) in &snap.nodes {
        let state = if *drained { format!("{state}+DRAIN") } else { state.clone() };
        let _ = writeln!(out, "<tr><td>{}</td><td>{}</td></tr>", esc(node), esc(&state));
    }
    let _ = writeln!(out, "</table>");

    // Open incidents, oldest first: who owns each drained or down node, and since when.
    let mut incidents: Vec<_> = snap.incidents.iter().collect();
    incidents.sort_by_key(|i| i.opened);
    let _ = writeln!(
        out,
        "<h2>Open incidents</h2>\n<table id=\"incidents\"><tr><th>Node</th><th>State</th><th>Reason</th><th>Owner</th><th>Ticket</th><th>Open for</th></tr>"
    );
    for incident in incidents {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&incident.node),
            incident.state,
            esc(&incident.reason),
            esc(crate::core::metrics::owner_label(&incident.owner)),
            esc(incident.ticket.as_deref().unwrap_or("")),
            age(now - incident.opened)
        );
    }
    let _ = writeln!(out, "</table>\n</body></html>");
    out
}

/// The top of the chart's axis: the tallest hour's GPU-hours rounded up to 1, 2, 2.5 or 5 times a
/// power of ten, so that the tallest bar fills at least 40 % of the chart at any scale (a few
/// GPU-seconds or thousands of GPU-hours); 1 on a chart with no usage.
fn axis_top(tallest: f64) -> f64 {
    if !tallest.is_finite() || tallest <= 0.0 {
        return 1.0;
    }
    let power = 10f64.powf(tallest.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|step| step * power)
        .find(|top| *top >= tallest * 0.999_999)
        .unwrap_or(10.0 * power)
}

/// An axis value as people write it: `0.05`, `2.5`, `20`, `0.0005`.
fn axis_label(value: f64) -> String {
    let text = format!("{value:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// An age as people read it: `42 s`, `17 min`, `5 h 3 min`, `2 d 4 h`.
fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_lists_teams_and_nodes() {
        let mut snap = Snapshot { gpus_total: 4, ..Snapshot::default() };
        snap.gpus_allocated.insert(("vision".into(), "main".into()), 2);
        snap.pending_by_account.insert("nlp".into(), 3);
        snap.nodes.push(("n1".into(), "MIXED".into(), false));
        let now = 100 * 3600 + 5;
        let page = render("c<1>", &snap, &[(now - 5, "vision".into(), 7200, 0)], now);
        assert!(page.contains("<h1>c&lt;1&gt;</h1>"));
        assert!(page.contains("<tr><td>vision</td><td>2</td><td>0</td><td>0</td><td>2.00</td></tr>"), "{page}");
        assert!(page.contains("<tr><td>nlp</td><td>0</td><td>0</td><td>3</td><td>0.00</td></tr>"), "{page}");
        assert!(page.contains("<tr><td>n1</td><td>MIXED</td></tr>"));
        assert!(page.contains("<rect "));
    }

    #[test]
    fn the_axis_follows_the_data() {
        assert_eq!(axis_top(0.06), 0.1);
        assert_eq!(axis_top(0.03), 0.05);
        assert_eq!(axis_top(0.000_55), 0.001);
        assert_eq!(axis_top(3.0), 5.0);
        assert_eq!(axis_top(2.0), 2.0);
        assert_eq!(axis_top(2.1), 2.5);
        assert_eq!(axis_top(730.0), 1000.0);
        assert_eq!(axis_top(0.0), 1.0);
        for tallest in [0.000_28, 0.001_7, 0.03, 0.06, 0.4, 7.9, 8.0, 123.0, 4_000.0] {
            let top = axis_top(tallest);
            assert!(top >= tallest && tallest / top >= 0.4, "{tallest} on an axis to {top}");
        }
        assert_eq!(axis_label(0.1), "0.1");
        assert_eq!(axis_label(0.05), "0.05");
        assert_eq!(axis_label(0.000_25), "0.00025");
        assert_eq!(axis_label(2.5), "2.5");
        assert_eq!(axis_label(1000.0), "1000");
    }

    /// What the issue saw: 0.03–0.06 GPU-hours per hour on a cluster with 8 GPUs drew bars of
    /// one or two pixels under an axis to 8.
    #[test]
    fn realistic_hours_fill_the_chart_on_a_cluster_with_many_gpus() {
        let snap = Snapshot { gpus_total: 8, ..Snapshot::default() };
        let now = 100 * 3600 + 5;
        let hours: Vec<_> = [(3, 108), (2, 216), (1, 144)]
            .into_iter()
            .map(|(ago, secs)| (now - ago * 3600, "vision".to_owned(), secs, 0))
            .collect();
        let page = render("c", &snap, &hours, now);
        assert!(page.contains("<text class=\"axis-top\" x=\"0\" y=\"14\" font-size=\"11\">0.1</text>"), "{page}");
        // 0.06 of 0.1 over the 190 px of the chart.
        assert!(page.contains("height=\"114.0\""), "{page}");
    }

    #[test]
    fn page_lists_open_incidents_with_owner_and_age() {
        let now = 100 * 3600;
        let mut snap = Snapshot::default();
        snap.incidents.push(crate::core::metrics::OpenIncident {
            node: "n2".into(),
            state: "DRAIN",
            reason: "fan <loud>".into(),
            owner: "hw-team".into(),
            ticket: Some("INC-7".into()),
            opened: now - 7380,
        });
        let page = render("c", &snap, &[], now);
        let row = "<tr><td>n2</td><td>DRAIN</td><td>fan &lt;loud&gt;</td><td>hw-team</td><td>INC-7</td><td>2 h 3 min</td></tr>";
        assert!(page.contains(row), "{page}");
    }
}
