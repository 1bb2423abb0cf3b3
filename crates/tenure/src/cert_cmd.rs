//! `tenure cert new NAME`: a client certificate issued by the local cluster's CA, whose
//! subject common name NAME is an identity of the cluster's `[auth]` section
//! (`[[auth.certs]]`, see `tenure_server::auth`). Clients present it with `--client-cert`
//! and `--client-key` (or `TENURE_CLIENT_CERT` and `TENURE_CLIENT_KEY`).

use crate::token_cmd::{parse_rule, rules_or_read, rules_toml};
use anyhow::{Context, bail};
use std::path::PathBuf;
use tenure_server::auth::{AuthConfig, CertConfig, Rule};
use tenure_server::certs::Authority;

/// Arguments of `tenure cert`.
#[derive(clap::Args, Debug)]
pub struct CertArgs {
    #[command(subcommand)]
    cmd: CertCmd,
}

#[derive(clap::Subcommand, Debug)]
enum CertCmd {
    /// A new client certificate from the local cluster's CA: NAME.crt and NAME.key (owner
    /// only), and the [[auth.certs]] entry to add to every device's configuration.
    New(NewArgs),
}

#[derive(clap::Args, Debug)]
struct NewArgs {
    /// The certificate's subject common name, the identity [[auth.certs]] names (letters,
    /// digits, `.`, `_` and `-`; also the files' name).
    name: String,
    /// The local cluster's data directory, whose CA (tls/ca.key) signs the certificate.
    #[arg(long, default_value = "tenure-data")]
    data: PathBuf,
    /// The directory NAME.crt and NAME.key are written to (never overwritten).
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// A rule PREFIX=PERMS for the entry printed, as `tenure token new --rule` takes;
    /// repeat for more. Default: `/=read`.
    #[arg(long = "rule", value_parser = parse_rule)]
    rules: Vec<Rule>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Run `tenure cert ...`.
pub fn run(args: CertArgs) -> anyhow::Result<()> {
    let CertCmd::New(a) = args.cmd;
    let name_ok = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if a.name.is_empty() || a.name.starts_with('.') || !a.name.chars().all(name_ok) {
        bail!(
            "{:?} is not a certificate name (letters, digits, `.`, `_`, `-`; not starting with `.`)",
            a.name
        );
    }
    let entry = CertConfig {
        cn: a.name.clone(),
        rules: rules_or_read(a.rules),
    };
    AuthConfig {
        enabled: true,
        certs: vec![entry.clone()],
        ..Default::default()
    }
    .validate()?;
    let ca_dir = crate::cluster::file::ca_dir(&a.data);
    let ca = Authority::load(&ca_dir).with_context(|| {
        format!(
            "no cluster CA in {} (`tenure cluster up` makes one; `--insecure` clusters have none)",
            ca_dir.display()
        )
    })?;
    let cert = a.out.join(format!("{}.crt", a.name));
    let key = a.out.join(format!("{}.key", a.name));
    for f in [&cert, &key] {
        if f.exists() {
            bail!("{} exists; remove it or choose another --out", f.display());
        }
    }
    ca.issue_client(&a.name, &cert, &key)?;
    let snippet = format!(
        "[[auth.certs]]\ncn = {:?}\nrules = {}\n",
        entry.cn,
        rules_toml(&entry.rules)
    );
    if a.json {
        println!(
            "{}",
            serde_json::json!({"cn": entry.cn, "cert": cert, "key": key, "ca": ca.cert_path,
                               "toml": snippet})
        );
    } else {
        println!(
            "certificate {} and key {} (owner only)",
            cert.display(),
            key.display()
        );
        println!(
            "present them with --client-cert and --client-key (or TENURE_CLIENT_CERT and \
             TENURE_CLIENT_KEY)"
        );
        println!();
        println!(
            "add to every device's server.toml (with `[auth] enabled = true`), then reload it \
             (SIGHUP) or restart it:"
        );
        print!("{snippet}");
    }
    Ok(())
}
