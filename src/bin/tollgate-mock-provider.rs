//! `tollgate-mock-provider`: the scriptable prediction server of API.md, as
//! its own process (so it outlives a Tollgate that is killed mid-call).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use tollgate::providers::mock::{DropConnection, MockConfig, MockProvider};

const USAGE: &str =
    "usage: tollgate-mock-provider --listen ADDR [--idempotency on|off] [--lookup on|off] \
                     [--latency-ms N] [--price-usd X | --no-price]";

fn on_off(flag: &str, v: Option<String>) -> Result<bool, String> {
    match v.as_deref() {
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        _ => Err(format!("{flag} takes on or off")),
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<(SocketAddr, MockConfig), String> {
    let mut listen = None;
    let mut config = MockConfig::default();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => {
                let v = args.next().ok_or("--listen takes an address")?;
                listen = Some(v.parse::<SocketAddr>().map_err(|_| {
                    format!("--listen: {v:?} is not an address like 127.0.0.1:9100")
                })?);
            }
            "--idempotency" => config.idempotency = on_off("--idempotency", args.next())?,
            "--lookup" => config.lookup = on_off("--lookup", args.next())?,
            "--latency-ms" => {
                let v = args.next().ok_or("--latency-ms takes a number")?;
                let ms: u64 = v
                    .parse()
                    .map_err(|_| format!("--latency-ms: {v:?} is not a number"))?;
                config.latency = Duration::from_millis(ms);
            }
            "--price-usd" => {
                let v = args.next().ok_or("--price-usd takes an amount")?;
                let usd =
                    tollgate::model::Usd::parse(&v).map_err(|e| format!("--price-usd: {e}"))?;
                config.price_usd = Some(usd.to_string());
            }
            "--no-price" => config.price_usd = None,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let listen = listen.ok_or_else(|| format!("--listen is required\n{USAGE}"))?;
    config.public_base = format!("http://{listen}");
    Ok((listen, config))
}

fn main() -> ExitCode {
    let (listen, config) = match parse(std::env::args().skip(1)) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("tollgate-mock-provider: {e}");
            return ExitCode::from(2);
        }
    };
    // Dropping a connection on purpose (accept_then_drop) is not news.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<DropConnection>().is_none() {
            default_hook(info);
        }
    }));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tollgate-mock-provider: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tollgate-mock-provider: --listen: cannot listen on {listen}: {e}");
                return ExitCode::from(2);
            }
        };
        eprintln!("tollgate-mock-provider listening on http://{listen}");
        match axum::serve(listener, MockProvider::new(config).router()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tollgate-mock-provider: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
