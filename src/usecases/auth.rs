//! Who is asking: password hashing (argon2id), API tokens (random, `tg_`
//! prefixed, stored only as SHA-256), login rate limits, browser sessions,
//! and the one guard every route uses to check a role.

use crate::model::{Role, UserId};
use crate::store::User;
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use argon2::password_hash::{
    rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString,
};
use argon2::Argon2;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use base64::Engine as _;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::marker::PhantomData;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use tower_sessions::Session;

/// Where the signed-in user's id lives in a session.
pub const SESSION_USER_KEY: &str = "tollgate.user_id";
/// When the session was signed in (unix milliseconds): its absolute age,
/// and whether it predates the user's `sessions_valid_after`.
pub const SESSION_STARTED_KEY: &str = "tollgate.started_ms";
/// A session is honoured at most this long after sign-in, however active.
pub const SESSION_LIFETIME_DAYS: i64 = 30;
/// The visible start of every API token, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "tg_";
/// Random bytes in a token (before encoding).
const TOKEN_BYTES: usize = 32;

// ---- passwords ----

/// Argon2 runs at once at most: each takes 19 MiB and a core for tens of
/// milliseconds, so a burst of sign-ins waits its turn instead of taking
/// every core and the memory with it (issue 29, 6).
fn argon2_cap() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8))
}

fn argon2_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| tokio::sync::Semaphore::new(argon2_cap()))
}

/// How many argon2 runs may go at once, and the most that ever did.
pub fn argon2_at_once() -> (usize, usize) {
    (argon2_cap(), argon2_running().1.load(Ordering::Acquire))
}

/// Argon2 runs going now, and the most ever at once.
fn argon2_running() -> &'static (AtomicUsize, AtomicUsize) {
    static RUNNING: (AtomicUsize, AtomicUsize) = (AtomicUsize::new(0), AtomicUsize::new(0));
    &RUNNING
}

/// Runs `work` (one argon2 hash or check) on a blocking thread, counted.
async fn with_argon2<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let _slot = argon2_slots().acquire().await.ok()?;
    tokio::task::spawn_blocking(move || {
        let (now, most) = argon2_running();
        let running = now.fetch_add(1, Ordering::AcqRel) + 1;
        most.fetch_max(running, Ordering::AcqRel);
        let out = work();
        now.fetch_sub(1, Ordering::AcqRel);
        out
    })
    .await
    .ok()
}

/// Hashes a password with argon2id off the async threads.
pub async fn hash_password(password: &str) -> Result<String> {
    let password = password.to_string();
    with_argon2(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| Error::Internal(format!("hashing a password: {e}")))
    })
    .await
    .unwrap_or_else(|| Err(Error::Internal("hashing a password stopped".into())))
}

/// Checks a password against a stored hash off the async threads.
pub async fn verify_password(hash: String, password: &str) -> bool {
    let password = password.to_string();
    with_argon2(move || match PasswordHash::new(&hash) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    })
    .await
    .unwrap_or(false)
}

/// A hash of a random password with the same parameters as real ones: an
/// unknown email is checked against it so it costs the same time as a known one.
fn dummy_hash() -> String {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY
        .get_or_init(|| {
            let salt = SaltString::generate(&mut OsRng);
            let mut secret = [0u8; 16];
            rand::thread_rng().fill_bytes(&mut secret);
            Argon2::default()
                .hash_password(&secret, &salt)
                .map(|h| h.to_string())
                .unwrap_or_default()
        })
        .clone()
}

/// A set-up token: 20 random bytes, URL-safe, to be typed or pasted once.
pub fn new_setup_token() -> String {
    let mut bytes = [0u8; 20];
    rand::thread_rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

// ---- API tokens ----

/// A freshly made token: the secret (shown once), its hash and display prefix.
pub struct FreshToken {
    pub secret: String,
    pub hash: String,
    pub prefix: String,
}

pub fn new_api_token() -> FreshToken {
    let mut bytes = [0u8; TOKEN_BYTES];
    rand::thread_rng().fill_bytes(&mut bytes);
    let secret = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    FreshToken {
        hash: token_hash(&secret),
        prefix: secret.chars().take(TOKEN_PREFIX.len() + 6).collect(),
        secret,
    }
}

/// SHA-256 of a token, hex: the only form a token is stored in.
pub fn token_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

// ---- login rate limits ----

/// Limits on sign-in attempts, in memory per node: per account *and*
/// address (a guesser slows down only themselves: five wrong passwords
/// from one place never lock the person out of another), and per address
/// over all accounts (one place cannot try many people).
pub struct LoginLimits {
    per_account: DefaultKeyedRateLimiter<(String, IpAddr)>,
    per_address: DefaultKeyedRateLimiter<IpAddr>,
}

impl LoginLimits {
    /// Attempts allowed per minute for one account, and from one address.
    pub fn new(per_account_per_minute: u32, per_address_per_minute: u32) -> Self {
        let quota = |n: u32| Quota::per_minute(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN));
        LoginLimits {
            per_account: RateLimiter::keyed(quota(per_account_per_minute)),
            per_address: RateLimiter::keyed(quota(per_address_per_minute)),
        }
    }

    /// `account` is normalised (trimmed, lower-case, bounded) so one
    /// account is one key however it is typed.
    pub(crate) fn check(&self, account: &str, address: Option<IpAddr>) -> Result<()> {
        let limited = Error::RateLimited { retry_after_s: 60 };
        if let Some(ip) = address {
            self.per_address.check_key(&ip).map_err(|_| limited)?;
        }
        let account: String = account.trim().to_lowercase().chars().take(320).collect();
        let from = address.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        self.per_account
            .check_key(&(account, from))
            .map_err(|_| Error::RateLimited { retry_after_s: 60 })
    }

    /// Forgets keys whose limits have fully recovered, so the limiters'
    /// memory stays bounded by the last minute's attempts.
    pub fn forget_idle(&self) {
        self.per_account.retain_recent();
        self.per_account.shrink_to_fit();
        self.per_address.retain_recent();
        self.per_address.shrink_to_fit();
    }

    /// Keys the limiters hold now.
    pub fn keys(&self) -> (usize, usize) {
        (self.per_account.len(), self.per_address.len())
    }
}

impl Tollgate {
    /// Forgets idle sign-in and paid-request limiter keys (run every
    /// minute by `serve`).
    pub fn forget_idle_login_limits(&self) {
        self.login_limits().forget_idle();
        self.paid_limits().forget_idle();
        self.test_event_limits().forget_idle();
    }

    /// Checks an email and password. A wrong password and an unknown email
    /// cost one argon2 verification each and return the same error.
    pub async fn login(
        &self,
        email: &str,
        password: &str,
        address: Option<IpAddr>,
    ) -> Result<User> {
        let key = email.trim().to_ascii_lowercase();
        self.login_limits().check(&key, address)?;
        if password.len() > crate::model::PASSWORD_LEN_MAX * 4 {
            return Err(Error::InvalidCredentials);
        }
        let user = self.store().user_by_email(&key).await?;
        let hash = match &user {
            Some(u) => self
                .store()
                .password_hash(u.id)
                .await?
                .unwrap_or_else(dummy_hash),
            None => dummy_hash(),
        };
        let ok = verify_password(hash, password).await;
        match user {
            Some(u) if ok && u.disabled => Err(Error::AccountDisabled),
            Some(u) if ok => Ok(u),
            _ => Err(Error::InvalidCredentials),
        }
    }

    /// The user behind a request: a Bearer token when the request carries
    /// one (a bad token is an error, never a fall-back to the session), else
    /// the session's user. Disabled users resolve to nobody.
    pub async fn resolve_principal(&self, parts: &mut Parts) -> Result<Option<Principal>> {
        if let Some(header) = parts.headers.get(axum::http::header::AUTHORIZATION) {
            let value = header.to_str().map_err(|_| Error::Unauthenticated)?;
            let secret = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
                .ok_or(Error::Unauthenticated)?
                .trim();
            if !secret.starts_with(TOKEN_PREFIX) || secret.len() > 200 {
                return Err(Error::Unauthenticated);
            }
            let (user, token) = self
                .store()
                .user_by_token_hash(&token_hash(secret), chrono::Utc::now())
                .await?
                .ok_or(Error::Unauthenticated)?;
            return Ok(Some(Principal {
                user,
                via: AuthVia::Token(token),
            }));
        }
        let Some(session) = parts.extensions.get::<Session>().cloned() else {
            return Ok(None);
        };
        let id: Option<UserId> = session
            .get(SESSION_USER_KEY)
            .await
            .map_err(|e| Error::Internal(format!("reading the session: {e}")))?;
        let Some(id) = id else { return Ok(None) };
        let started: Option<i64> = session
            .get(SESSION_STARTED_KEY)
            .await
            .map_err(|e| Error::Internal(format!("reading the session: {e}")))?;
        let Some(started) = started.and_then(chrono::DateTime::from_timestamp_millis) else {
            // A session from before sign-in times were kept: sign in again.
            return Ok(None);
        };
        if chrono::Utc::now() - started > chrono::Duration::days(SESSION_LIFETIME_DAYS) {
            return Ok(None);
        }
        match self.store().user_by_id(id).await? {
            Some(user)
                if !user.disabled
                    && user.sessions_valid_after.is_none_or(|after| {
                        // Sessions are stamped to the millisecond.
                        started.timestamp_millis() >= after.timestamp_millis()
                    }) =>
            {
                Ok(Some(Principal {
                    user,
                    via: AuthVia::Session,
                }))
            }
            _ => Ok(None),
        }
    }
}

/// Starts a signed-in session: a new session id (so one planted before
/// login is worthless), then the user id.
pub async fn begin_session(session: &Session, user: UserId) -> Result<()> {
    session
        .cycle_id()
        .await
        .map_err(|e| Error::Internal(format!("rotating the session: {e}")))?;
    session
        .insert(SESSION_USER_KEY, user)
        .await
        .map_err(|e| Error::Internal(format!("writing the session: {e}")))?;
    stamp_session(session, chrono::Utc::now()).await
}

/// Records when the session was signed in (or, after a password change,
/// re-confirmed): it is honoured from then on.
pub async fn stamp_session(session: &Session, at: chrono::DateTime<chrono::Utc>) -> Result<()> {
    session
        .insert(SESSION_STARTED_KEY, at.timestamp_millis())
        .await
        .map_err(|e| Error::Internal(format!("writing the session: {e}")))
}

/// Ends a session: its record is deleted and the cookie cleared.
pub async fn end_session(session: &Session) -> Result<()> {
    session
        .flush()
        .await
        .map_err(|e| Error::Internal(format!("ending the session: {e}")))
}

/// The session middleware, over the same database as everything else.
pub fn session_layer(
    tollgate: &Tollgate,
) -> tower_sessions::SessionManagerLayer<crate::store::SessionBackend> {
    let idle = tower_sessions::Expiry::OnInactivity(time::Duration::minutes(
        tollgate.config().session_idle_minutes,
    ));
    // Over https the cookie is `__Host-`: Secure, for this host and path /
    // only, so no subdomain can set or shadow it.
    let name = if tollgate.config().secure_cookies {
        "__Host-tollgate_session"
    } else {
        "tollgate_session"
    };
    tower_sessions::SessionManagerLayer::new(tollgate.store().session_backend())
        .with_name(name)
        .with_http_only(true)
        .with_same_site(tower_sessions::cookie::SameSite::Lax)
        .with_secure(tollgate.config().secure_cookies)
        .with_path("/")
        .with_expiry(idle)
}

// ---- principals and the role guard ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthVia {
    Session,
    /// The API token the request carried (what its jobs are spent under).
    Token(crate::model::ApiTokenId),
}

/// A signed-in user, and how they proved it.
#[derive(Clone, Debug)]
pub struct Principal {
    pub user: User,
    pub via: AuthVia,
}

impl Principal {
    /// The API token behind this request; `None` for a page's session.
    pub fn token(&self) -> Option<crate::model::ApiTokenId> {
        match self.via {
            AuthVia::Token(t) => Some(t),
            AuthVia::Session => None,
        }
    }

    /// The one role check. Every guard, page and handler calls this.
    pub fn require(&self, role: Role) -> Result<()> {
        if self.user.role.allows(role) {
            Ok(())
        } else {
            Err(Error::Forbidden)
        }
    }
}

/// The principal of a request, resolved once and cached in its extensions.
#[derive(Clone, Debug)]
pub struct ResolvedPrincipal(pub Option<Principal>);

impl FromRequestParts<Tollgate> for Principal {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &Tollgate) -> Result<Self> {
        if let Some(ResolvedPrincipal(p)) = parts.extensions.get::<ResolvedPrincipal>() {
            return p.clone().ok_or(Error::Unauthenticated);
        }
        let resolved = state.resolve_principal(parts).await?;
        parts.extensions.insert(ResolvedPrincipal(resolved.clone()));
        resolved.ok_or(Error::Unauthenticated)
    }
}

/// The least role a route group needs.
pub trait RoleBound: Send + Sync + 'static {
    const ROLE: Role;
}

/// Any signed-in user.
pub struct AnyUser;
/// Reviewers and admins.
pub struct ReviewerOnly;
/// Admins.
pub struct AdminOnly;

impl RoleBound for AnyUser {
    const ROLE: Role = Role::User;
}
impl RoleBound for ReviewerOnly {
    const ROLE: Role = Role::Reviewer;
}
impl RoleBound for AdminOnly {
    const ROLE: Role = Role::Admin;
}

/// Extractor: a principal whose role allows `R`. Unauthenticated is 401, a
/// weaker role 403.
pub struct Authorized<R: RoleBound>(pub Principal, PhantomData<R>);

impl<R: RoleBound> Authorized<R> {
    pub fn user(&self) -> &User {
        &self.0.user
    }
}

impl<R: RoleBound> FromRequestParts<Tollgate> for Authorized<R> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &Tollgate) -> Result<Self> {
        let principal = Principal::from_request_parts(parts, state).await?;
        principal.require(R::ROLE)?;
        Ok(Authorized(principal, PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_hashed() {
        let a = new_api_token();
        let b = new_api_token();
        assert!(a.secret.starts_with("tg_"));
        assert!(a.secret.len() >= TOKEN_PREFIX.len() + 43);
        assert_ne!(a.secret, b.secret);
        assert_eq!(a.hash, token_hash(&a.secret));
        assert_eq!(a.hash.len(), 64);
        assert!(!a.hash.contains(&a.secret));
        assert!(a.secret.starts_with(&a.prefix));
    }
}

/// `scheme://host[:port]` of a URL, lower-cased; `None` when it has none.
pub fn origin_of(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    u.host_str()?;
    Some(u.origin().ascii_serialization().to_ascii_lowercase())
}

/// Where a sign-in may send a person: only a path of this app. The target
/// is parsed as a URL relative to our own origin (as a browser would) and
/// kept only when the origin is unchanged; control characters, spaces and
/// backslashes (which browsers read as slashes: `/\\evil`, `/\t/evil`) are
/// refused outright. Anything else goes to `/edits`.
pub fn safe_redirect(next: &str) -> &str {
    const HOME: &str = "/edits";
    if !next.starts_with('/')
        || next.len() > 2000
        || next
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == '\\')
    {
        return HOME;
    }
    let Ok(base) = reqwest::Url::parse("http://tollgate.invalid/") else {
        return HOME;
    };
    match base.join(next) {
        Ok(u) if u.origin() == base.origin() => next,
        _ => HOME,
    }
}

#[cfg(test)]
mod redirect_tests {
    use super::safe_redirect;

    #[test]
    fn only_our_own_paths() {
        for ok in [
            "/edits",
            "/edits/123?x=1#y",
            "/review?stage=polling_exhausted",
            "/a/b/../c",
            // Encoded, so it stays inside the path: no header can be split.
            "/%0d%0aSet-Cookie:x",
        ] {
            assert_eq!(safe_redirect(ok), ok);
        }
        for bad in [
            "//evil.example",
            "/\t/evil.example",
            "/\tevil.example",
            "/\\evil.example",
            "\\\\evil.example",
            "https://evil.example/",
            "http:evil.example",
            "/ /evil.example",
            "/\n/evil.example",
            "javascript:alert(1)",
            "evil.example",
            "",
        ] {
            assert_eq!(safe_redirect(bad), "/edits", "{bad:?}");
        }
    }
}
