//! `tenure lab`: the seeds' analytic tables reproduced by measurement (DESIGN §6), one
//! table per experiment — the seed's figure, the measured median and maximum over the
//! seeds, and a verdict with its reason. Exit status 2 when a row fails.

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use tenure_sim::lab::report::num;
use tenure_sim::lab::{Experiment, Row, Scale, run};

/// Exit status when a measured figure fails its verdict.
const EXIT_FAILS: u8 = 2;

/// Which table to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// Lecture Fig. 14.7: the four mutual-exclusion algorithms.
    Mutex,
    /// Lecture §14.3.3: bully and ring elections, n = 3…32.
    Election,
    /// Menasce §3: SafeTalk against two-phase commit.
    Safetalk,
    /// Menasce §8: update cost C_updt, LC among the k sites and at none, and delay
    /// D_updt, for k = 2…9.
    Update,
    /// Menasce §4.1, §8: logical component recovery, beside Tenure's recovery from a
    /// manager crash; Menasce §4.5: logical component merge.
    Recovery,
    /// Aladdin §4: outage after a leader crash and staleness, against the seed's bounds.
    Lookup,
    /// Every experiment.
    All,
}

#[derive(Args, Debug)]
pub struct LabArgs {
    /// The experiment.
    #[arg(value_enum, default_value = "all")]
    which: Which,
    /// Seeds per measured figure.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// The small sizes the tests use (quick).
    #[arg(long)]
    small: bool,
    /// Print the rows as JSON.
    #[arg(long)]
    json: bool,
    /// Also write one CSV file per experiment into this directory.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Also write one SVG plot per experiment with a size axis (mutex, election, update,
    /// recovery) into this directory: measured median and max against n or k, beside
    /// the paper's figure.
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
}

pub fn run_lab(args: LabArgs) -> anyhow::Result<ExitCode> {
    let experiments: Vec<Experiment> = match args.which {
        Which::Mutex => vec![Experiment::Mutex],
        Which::Election => vec![Experiment::Election],
        Which::Safetalk => vec![Experiment::SafeTalk],
        Which::Update => vec![Experiment::Update],
        Which::Recovery => vec![Experiment::Recovery],
        Which::Lookup => vec![Experiment::Lookup],
        Which::All => Experiment::ALL.to_vec(),
    };
    if args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    let scale = if args.small {
        Scale::small(args.seeds)
    } else {
        Scale::full(args.seeds)
    };
    for dir in args.csv.iter().chain(&args.svg) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut all = Vec::new();
    for e in experiments {
        let t = std::time::Instant::now();
        let rows = run(e, &scale);
        eprintln!(
            "lab {}: {} rows in {:.1} s",
            e.name(),
            rows.len(),
            t.elapsed().as_secs_f64()
        );
        if let Some(dir) = &args.csv {
            let path = dir.join(format!("{}.csv", e.name()));
            std::fs::write(&path, csv(&rows))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let sized = matches!(
            e,
            Experiment::Mutex | Experiment::Election | Experiment::Update | Experiment::Recovery
        );
        if let Some(dir) = args.svg.as_ref().filter(|_| sized)
            && let Some(svg) = crate::lab_svg::plot(title(e), &rows)
        {
            let path = dir.join(format!("{}.svg", e.name()));
            std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        }
        if !args.json {
            print_table(e, &rows, args.seeds);
        }
        all.extend(rows);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    }
    let failing = all.iter().filter(|r| !r.verdict.holds()).count();
    if failing > 0 {
        eprintln!("{failing} row(s) fail their verdict");
        return Ok(ExitCode::from(EXIT_FAILS));
    }
    Ok(ExitCode::SUCCESS)
}

fn title(e: Experiment) -> &'static str {
    match e {
        Experiment::Mutex => "mutual exclusion — lecture §14.4, Fig. 14.7",
        Experiment::Election => "elections — lecture §14.3.3",
        Experiment::SafeTalk => "SafeTalk vs two-phase commit — Menasce §3",
        Experiment::Update => "update cost C_updt — Menasce §8",
        Experiment::Recovery => {
            "logical component recovery C_rec and R, and merge — Menasce §4.1, §4.5, §8"
        }
        Experiment::Lookup => "lookup outage and staleness — Aladdin (seed 003)",
    }
}

fn print_table(e: Experiment, rows: &[Row], seeds: u64) {
    println!("\n## {} ({seeds} seeds)\n", title(e));
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.what.clone(),
                r.paper.clone(),
                num(r.median),
                num(r.max),
                r.verdict.name().to_string(),
                r.note.clone(),
            ]
        })
        .collect();
    let head = ["row", "paper", "median", "max", "verdict", "why"];
    let mut w = head.map(|h| h.chars().count());
    for c in &cells {
        for (i, s) in c.iter().enumerate().take(5) {
            w[i] = w[i].max(s.chars().count());
        }
    }
    let line = |c: &[String; 6]| {
        let pad = |s: &str, n: usize| format!("{s}{}", " ".repeat(n - s.chars().count()));
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            pad(&c[0], w[0]),
            pad(&c[1], w[1]),
            pad(&c[2], w[2]),
            pad(&c[3], w[3]),
            pad(&c[4], w[4]),
            c[5]
        );
    };
    line(&head.map(String::from));
    println!(
        "|{}|{}|{}|{}|{}|---|",
        "-".repeat(w[0] + 2),
        "-".repeat(w[1] + 2),
        "-".repeat(w[2] + 2),
        "-".repeat(w[3] + 2),
        "-".repeat(w[4] + 2)
    );
    for c in &cells {
        line(c);
    }
}

/// One CSV field, quoted when it needs to be.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv(rows: &[Row]) -> String {
    let mut out = String::from("experiment,row,paper,median,max,verdict,why\n");
    for r in rows {
        let cells = [
            r.experiment.to_string(),
            r.what.clone(),
            r.paper.clone(),
            num(r.median),
            num(r.max),
            r.verdict.name().to_string(),
            r.note.clone(),
        ];
        let line: Vec<String> = cells.iter().map(|c| field(c)).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_commas_and_quotes_are_quoted() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a, b"), "\"a, b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
