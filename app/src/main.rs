//! `tollgate`: the one binary. Serves the app, migrates, and manages users,
//! credits and tokens from the command line (see API.md).

use clap::{Parser, Subcommand, ValueEnum};
use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;
use tollgate::config::{Config, ConfigError, LogFormat};
use tollgate::model::{Credits, Role};
use tollgate::Tollgate;

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "The control plane for paid AI generation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the app (migrates the database first).
    Serve {
        #[arg(long, value_enum, default_value_t = NodeRole::All)]
        role: NodeRole,
    },
    /// Apply migrations and exit.
    Migrate,
    /// Print the OpenAPI document of the /v1 API (what /v1/openapi.json serves).
    Openapi,
    /// Manage users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Manage credits.
    Credits {
        #[command(subcommand)]
        command: CreditsCommand,
    },
    /// Manage API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
enum NodeRole {
    All,
    Web,
    Worker,
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create a user; the password comes from TOLLGATE_PASSWORD or standard input.
    Add {
        #[arg(long)]
        email: String,
        #[arg(long)]
        role: Role,
    },
    /// Set a new password (from TOLLGATE_PASSWORD or standard input); that
    /// person's sessions end.
    SetPassword {
        #[arg(long)]
        email: String,
    },
}

#[derive(Subcommand)]
enum CreditsCommand {
    /// Append a grant to the ledger.
    Grant {
        #[arg(long)]
        email: String,
        #[arg(long)]
        amount: i64,
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create an API token and print only the token.
    Create {
        #[arg(long)]
        email: String,
        #[arg(long)]
        name: Option<String>,
    },
}

/// A failure that ends the process with one line on standard error.
struct Fatal(String);

impl From<ConfigError> for Fatal {
    fn from(e: ConfigError) -> Self {
        Fatal(e.to_string())
    }
}

impl From<tollgate::Error> for Fatal {
    fn from(e: tollgate::Error) -> Self {
        match e {
            tollgate::Error::Internal(m) => Fatal(m),
            other => Fatal(other.to_string()),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tollgate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fatal(message)) => {
            eprintln!("tollgate: {message}");
            ExitCode::from(2)
        }
    }
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("TOLLGATE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

async fn run(cli: Cli) -> Result<(), Fatal> {
    if let Command::Openapi = cli.command {
        let doc = serde_json::to_string_pretty(tollgate::api::document())
            .map_err(|e| Fatal(format!("encoding the document: {e}")))?;
        println!("{doc}");
        return Ok(());
    }
    let config = Config::from_env()?;
    init_logging(config.log_format);
    match cli.command {
        Command::Serve { role } => serve(config, role).await,
        Command::Openapi => Ok(()),
        Command::Migrate => {
            Tollgate::open(config).await?;
            println!("migrations applied");
            Ok(())
        }
        Command::User { command } => user_command(Tollgate::open(config).await?, command).await,
        Command::Credits {
            command:
                CreditsCommand::Grant {
                    email,
                    amount,
                    reason,
                },
        } => {
            let tollgate = Tollgate::open(config).await?;
            let user = tollgate.user_by_email(&email).await?;
            let (entry, _) = tollgate
                .grant_credits(None, user.id, Credits(amount), reason.as_deref(), None)
                .await?;
            let balance = tollgate.user(user.id).await?.balance;
            println!(
                "granted {} credits to {} (balance {balance}; reference {})",
                entry.amount, user.email, entry.reference
            );
            Ok(())
        }
        Command::Token {
            command: TokenCommand::Create { email, name },
        } => {
            let tollgate = Tollgate::open(config).await?;
            let user = tollgate.user_by_email(&email).await?;
            let (_, secret) = tollgate
                .create_api_token(&user, name.as_deref().unwrap_or("command line"))
                .await?;
            println!("{secret}");
            Ok(())
        }
    }
}

/// `tollgate user add` and `tollgate user set-password`.
async fn user_command(tollgate: Tollgate, command: UserCommand) -> Result<(), Fatal> {
    match command {
        UserCommand::Add { email, role } => {
            let password = read_password()?;
            let user = tollgate.add_user(&email, role, &password).await?;
            println!("{} {} {}", user.id, user.email, user.role);
        }
        UserCommand::SetPassword { email } => {
            let user = tollgate.user_by_email(&email).await?;
            let password = read_password()?;
            tollgate
                .set_password(None, user.id, &password, &password)
                .await?;
            println!("password set for {}; their sessions ended", user.email);
        }
    }
    Ok(())
}

/// TOLLGATE_PASSWORD, or the first line of standard input.
fn read_password() -> Result<String, Fatal> {
    if let Ok(p) = std::env::var("TOLLGATE_PASSWORD") {
        return Ok(p);
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("Password: ");
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .map_err(|e| Fatal(format!("reading the password from standard input: {e}")))?;
    let line = line.trim_end_matches(['\r', '\n']).to_string();
    if line.is_empty() {
        return Err(Fatal(
            "no password: set TOLLGATE_PASSWORD or pass it on standard input".into(),
        ));
    }
    Ok(line)
}

async fn serve(config: Config, role: NodeRole) -> Result<(), Fatal> {
    tollgate_app::server::listen::raise_open_file_limit();
    let listen = config.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Fatal(format!("TOLLGATE_LISTEN: cannot listen on {listen}: {e}")))?;
    let tollgate = Tollgate::open(config).await?;
    if matches!(role, NodeRole::All | NodeRole::Web) && tollgate.setup_needed().await? {
        announce_setup(&tollgate);
    }

    spawn_housekeeping(&tollgate);

    let engine = match role {
        NodeRole::All | NodeRole::Worker => {
            let workers = tollgate.config().workers;
            tracing::info!(workers, "starting workers");
            Some(tollgate::engine::start(tollgate.clone(), workers))
        }
        NodeRole::Web => None,
    };

    if let Some(ops) = tollgate.config().ops_listen {
        let listener = tokio::net::TcpListener::bind(ops)
            .await
            .map_err(|e| Fatal(format!("TOLLGATE_OPS_LISTEN: cannot listen on {ops}: {e}")))?;
        let internal = tollgate::api::internal_router(tollgate.clone());
        tracing::info!(%ops, "operations (health, metrics) on http://{ops}");
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, internal).await {
                tracing::warn!(error = %e, "the operations listener stopped");
            }
        });
    }

    let app = match role {
        NodeRole::All | NodeRole::Web => tollgate_app::server::router(tollgate.clone()),
        // A worker node runs jobs and answers health checks.
        NodeRole::Worker => tollgate::api::ops_router(tollgate.clone()),
    };
    tracing::info!(%listen, ?role, backend = ?tollgate.backend(), "Tollgate is listening on http://{listen}");
    let limits = tollgate.config().exposure.clone();
    tollgate_app::server::listen::serve(listener, app, &limits, shutdown_signal())
        .await
        .map_err(|e| Fatal(format!("serving: {e}")))?;
    if let Some(engine) = engine {
        // Stop claiming; jobs held between steps go back to the queue.
        engine.shutdown().await;
    }
    tollgate.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// The node's periodic chores, each on its own task: expired sessions
/// deleted, idle limiter keys forgotten, week-old idempotency keys freed.
fn spawn_housekeeping(tollgate: &Tollgate) {
    let sessions = tollgate.session_backend();
    tokio::spawn(async move {
        use tower_sessions::session_store::ExpiredDeletion;
        if let Err(e) = sessions
            .continuously_delete_expired(std::time::Duration::from_secs(600))
            .await
        {
            tracing::warn!(error = %e, "expired-session cleanup stopped");
        }
    });

    // The sign-in limiters forget keys that recovered: bounded memory.
    let limits = tollgate.clone();
    tokio::spawn(async move {
        let mut every_minute = tokio::time::interval(std::time::Duration::from_secs(60));
        loop {
            every_minute.tick().await;
            limits.forget_idle_login_limits();
        }
    });

    // Idempotency keys are kept for a week, then freed (README).
    let keeper = tollgate.clone();
    tokio::spawn(async move {
        let mut every_hour = tokio::time::interval(std::time::Duration::from_secs(3600));
        loop {
            every_hour.tick().await;
            match keeper.expire_idempotency_keys().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(freed = n, "expired idempotency keys"),
                Err(e) => tracing::warn!(error = %e, "expiring idempotency keys failed"),
            }
        }
    });
}

/// Prints where and with what token the first admin is made: the console
/// is what only the person running the server sees.
fn announce_setup(tollgate: &Tollgate) {
    let config = tollgate.config();
    let base = config.public_origin.clone().unwrap_or_else(|| {
        let mut at = config.listen;
        if at.ip().is_unspecified() {
            at.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        format!("http://{at}")
    });
    let token = tollgate.setup_token();
    println!(
        "First-run set-up: open {base}/setup?token={token} to create the first admin \
         (the set-up token is {token}; it works until an admin exists). \
         `tollgate user add --email EMAIL --role admin` does the same from a shell."
    );
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
