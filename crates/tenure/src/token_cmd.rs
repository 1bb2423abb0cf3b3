//! `tenure token new|hash`: make the tokens of a cluster's `[auth]` section
//! (`tenure_server::auth`). The configuration holds a token's SHA-256 only; the secret
//! is printed once and given to clients (`--auth-token`, `TENURE_TOKEN`).

use anyhow::{Context, bail};
use std::io::Read;
use tenure_server::auth::{Perm, Rule, TokenConfig, hash_secret, new_secret};

/// Arguments of `tenure token`.
#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    cmd: TokenCmd,
}

#[derive(clap::Subcommand, Debug)]
enum TokenCmd {
    /// A new token: a random secret, and the [[auth.tokens]] entry to add to every
    /// device's configuration.
    New(NewArgs),
    /// The SHA-256 of a secret, as `sha256` in [[auth.tokens]] (the secret from the
    /// argument, or from stdin).
    Hash(HashArgs),
}

#[derive(clap::Args, Debug)]
struct NewArgs {
    /// The token's name (in error messages and logs).
    name: String,
    /// A rule PREFIX=PERMS, PERMS a comma-separated list of read, lock, write, admin
    /// (e.g. `/jobs/=lock`); repeat for more. Default: `/=read`.
    #[arg(long = "rule", value_parser = parse_rule)]
    rules: Vec<Rule>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct HashArgs {
    /// The secret (default: read from stdin, which keeps it out of the shell history).
    secret: Option<String>,
}

/// A rule from the command line: PREFIX=PERMS.
pub(crate) fn parse_rule(s: &str) -> Result<Rule, String> {
    let (prefix, perms) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not PREFIX=PERMS (e.g. /jobs/=read,lock)"))?;
    let perms = perms
        .split(',')
        .map(|p| match p.trim() {
            "read" => Ok(Perm::Read),
            "lock" => Ok(Perm::Lock),
            "write" => Ok(Perm::Write),
            "admin" => Ok(Perm::Admin),
            other => Err(format!(
                "unknown permission {other:?} (read, lock, write, admin)"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Rule {
        prefix: prefix.to_string(),
        perms,
    })
}

/// Run `tenure token ...`.
pub fn run(args: TokenArgs) -> anyhow::Result<()> {
    match args.cmd {
        TokenCmd::New(a) => new(a),
        TokenCmd::Hash(a) => {
            let secret = match a.secret {
                Some(s) => s,
                None => {
                    let mut s = String::new();
                    std::io::stdin()
                        .read_to_string(&mut s)
                        .context("reading the secret from stdin")?;
                    s
                }
            };
            let secret = secret.trim();
            if secret.is_empty() {
                bail!("no secret given");
            }
            println!("{}", hash_secret(secret));
            Ok(())
        }
    }
}

fn new(a: NewArgs) -> anyhow::Result<()> {
    let secret = new_secret()?;
    let rules = rules_or_read(a.rules);
    let token = TokenConfig {
        name: a.name,
        sha256: hash_secret(&secret),
        rules,
    };
    let check = tenure_server::auth::AuthConfig {
        enabled: true,
        tokens: vec![token.clone()],
        certs: Vec::new(),
    };
    check.validate()?;
    let snippet = format!(
        "[[auth.tokens]]\nname = {:?}\nsha256 = {:?}\nrules = {}\n",
        token.name,
        token.sha256,
        rules_toml(&token.rules)
    );
    if a.json {
        println!(
            "{}",
            serde_json::json!({"name": token.name, "secret": secret, "sha256": token.sha256,
                               "toml": snippet})
        );
    } else {
        println!(
            "secret (give it to clients with --auth-token or TENURE_TOKEN; it is stored nowhere):"
        );
        println!("{secret}");
        println!();
        println!(
            "add to every device's server.toml (with `[auth] enabled = true`), then reload it \
             (SIGHUP) or restart it:"
        );
        print!("{snippet}");
    }
    Ok(())
}

/// Rules as the configuration writes them: an inline TOML array.
pub(crate) fn rules_toml(rules: &[Rule]) -> String {
    let rules: Vec<String> = rules
        .iter()
        .map(|r| {
            let perms: Vec<String> = r
                .perms
                .iter()
                .map(|p| format!("{:?}", p.as_str()))
                .collect();
            format!(
                "{{ prefix = {:?}, perms = [{}] }}",
                r.prefix,
                perms.join(", ")
            )
        })
        .collect();
    format!("[{}]", rules.join(", "))
}

/// The rules given on the command line, or read on `/` when none are.
pub(crate) fn rules_or_read(rules: Vec<Rule>) -> Vec<Rule> {
    if !rules.is_empty() {
        return rules;
    }
    vec![Rule {
        prefix: "/".into(),
        perms: vec![Perm::Read],
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_from_the_command_line() {
        let r = parse_rule("/jobs/=read,lock").unwrap();
        assert_eq!(r.prefix, "/jobs/");
        assert_eq!(r.perms, vec![Perm::Read, Perm::Lock]);
        assert!(parse_rule("/jobs").is_err());
        assert!(parse_rule("/jobs=root").is_err());
    }
}
