//! The checks every request passes: that it names a host this node answers
//! for (a page using DNS rebinding names its own), who it is and whether
//! their role may open the page (one table, `page_access`), and, for
//! state-changing requests that ride on a cookie, that they come from our
//! own pages.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use tollgate::model::Role;
use tollgate::usecases::auth::ResolvedPrincipal;
use tollgate::Tollgate;

/// Who may open a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone; or the route checks for itself (the API, server functions).
    Open,
    /// Signed in with at least this role.
    Role(Role),
}

/// The one table of page access. Route groups: `/admin` for admins,
/// `/review` for reviewers, every other page for any signed-in user.
pub fn page_access(path: &str) -> Access {
    match path {
        "/login" | "/setup" | "/logout" | "/forbidden" | "/healthz" | "/readyz"
        | "/favicon.svg" | "/docs/api" => Access::Open,
        p if p == "/v1"
            || p.starts_with("/v1/")
            || p.starts_with("/api/")
            || p.starts_with("/pkg/") =>
        {
            Access::Open
        }
        p if p == "/admin" || p.starts_with("/admin/") => Access::Role(Role::Admin),
        p if p == "/review" || p.starts_with("/review/") => Access::Role(Role::Reviewer),
        _ => Access::Role(Role::User),
    }
}

pub async fn role_guard(State(t): State<Tollgate>, req: Request, next: Next) -> Response {
    // Static files and health checks never need to know who asks: skip the
    // session and user lookups they would otherwise cost on every request.
    if is_anonymous_route(req.uri().path()) {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    // Pages, form routes and server functions are cookie-only: an API token
    // drives `/v1` (and reads `/metrics`) and nothing else (it cannot sign a form post, and it is
    // never mistaken for the person's session).
    if !(path == "/v1" || path.starts_with("/v1/") || path == "/metrics") {
        parts.headers.remove(header::AUTHORIZATION);
    }
    let principal = match t.resolve_principal(&mut parts).await {
        Ok(p) => {
            parts.extensions.insert(ResolvedPrincipal(p.clone()));
            p
        }
        // A bad token on the API is answered by the API's own extractor;
        // on a page it is simply nobody.
        Err(_) if path.starts_with("/v1") => None,
        Err(_) => {
            parts.extensions.insert(ResolvedPrincipal(None));
            None
        }
    };
    let is_get = parts.method == Method::GET;
    if is_get {
        let role = principal.as_ref().map(|p| p.user.role);
        if let Some(elsewhere) = sign_in_redirect(&t, &path, role).await {
            return elsewhere;
        }
    }

    match page_access(&path) {
        Access::Open => next.run(Request::from_parts(parts, body)).await,
        Access::Role(required) => match &principal {
            None if is_get => {
                let wanted = parts
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str())
                    .unwrap_or("/");
                let next_param: String = url_escape(wanted);
                Redirect::to(&format!("/login?next={next_param}")).into_response()
            }
            None => (StatusCode::UNAUTHORIZED, "sign in first").into_response(),
            Some(p) if !p.user.role.allows(required) => {
                if !is_get {
                    return (StatusCode::FORBIDDEN, "your role does not allow this")
                        .into_response();
                }
                // Render the Forbidden page in place, with a 403.
                parts.uri = Uri::from_static("/forbidden");
                let mut response = next.run(Request::from_parts(parts, body)).await;
                *response.status_mut() = StatusCode::FORBIDDEN;
                response
            }
            Some(_) => next.run(Request::from_parts(parts, body)).await,
        },
    }
}

/// The front door, sign-in and set-up pages send a person where they
/// belong: someone signed in to their role's home, anyone to set-up while
/// no admin exists, and nobody to set-up once one does.
async fn sign_in_redirect(
    t: &Tollgate,
    path: &str,
    role: Option<tollgate::model::Role>,
) -> Option<Response> {
    match (path, role) {
        ("/" | "/login", Some(role)) => {
            Some(Redirect::to(crate::app::home_of(role)).into_response())
        }
        ("/", None) => Some(Redirect::to("/login").into_response()),
        _ => sign_in_or_set_up(t, path).await,
    }
}

async fn sign_in_or_set_up(t: &Tollgate, path: &str) -> Option<Response> {
    match path {
        "/login" if t.setup_needed().await.unwrap_or(false) => {
            Some(Redirect::to("/setup").into_response())
        }
        "/setup" if !t.setup_needed().await.unwrap_or(true) => {
            Some(Redirect::to("/login").into_response())
        }
        _ => None,
    }
}

fn is_anonymous_route(path: &str) -> bool {
    path.starts_with("/pkg/")
        || matches!(path, "/favicon.svg" | "/healthz" | "/readyz" | "/metrics")
}

fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// A state-changing request must come from a page of ours: its `Origin`
/// (or, failing that, `Referer`) names our public origin when one is set,
/// else the Host it was sent to. Only `/v1` may be driven by an API token
/// instead (a token carries no ambient authority); form routes and server
/// functions are cookie-only, so a token header never skips the check.
/// Refuses a request for a host name the node does not answer for
/// (issue 29, 5): a stranger's page whose name was rebound to this node's
/// address would otherwise read and post as if it were ours. Health checks
/// answer anyone: they say nothing.
pub async fn host_check(State(t): State<Tollgate>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    let config = t.config();
    let allowed = match &host {
        // HTTP/1.0 without a host: no browser sends that, so no page can.
        None => true,
        Some(host) => config
            .exposure
            .host_allowed(host, config.public_origin.as_deref()),
    };
    if allowed || matches!(req.uri().path(), "/healthz" | "/readyz") {
        return next.run(req).await;
    }
    tollgate::Error::BadRequest {
        status: 421,
        code: "UNKNOWN_HOST",
        message: "this server does not answer for that host name; its operator can add it \
                  to TOLLGATE_ALLOWED_HOSTS or set TOLLGATE_PUBLIC_URL"
            .into(),
    }
    .into_response()
}

pub async fn cross_site_check(State(t): State<Tollgate>, req: Request, next: Next) -> Response {
    // Only what can change state is checked; any other method goes on to
    // the router (which answers 405 where it has no such route).
    let safe = !matches!(
        *req.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let path = req.uri().path();
    let api_token = (path == "/v1" || path.starts_with("/v1/"))
        && req.headers().contains_key(header::AUTHORIZATION);
    // Read-only routes with no state-changing method: the router answers 405.
    let read_only = matches!(path, "/healthz" | "/readyz" | "/metrics");
    // Without a cookie there is no ambient authority to forge; signing in
    // and set-up are checked anyway (no one may be signed in by another site).
    let ambient = req.headers().contains_key(header::COOKIE) || matches!(path, "/login" | "/setup");
    if safe
        || api_token
        || read_only
        || !ambient
        || same_origin(req.headers(), t.config().public_origin.as_deref())
    {
        return next.run(req).await;
    }
    tollgate::Error::BadRequest {
        status: 403,
        code: "CROSS_SITE_REQUEST",
        message: "this request did not come from a Tollgate page".into(),
    }
    .into_response()
}

pub fn same_origin(headers: &HeaderMap, public_origin: Option<&str>) -> bool {
    let source = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .and_then(tollgate::usecases::auth::origin_of);
    let Some(source) = source else {
        return false;
    };
    match public_origin {
        Some(public) => source == public.to_ascii_lowercase(),
        None => {
            let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
                return false;
            };
            // Without a public URL we only know the host asked for.
            source
                .split_once("://")
                .is_some_and(|(_, h)| h.eq_ignore_ascii_case(host))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_groups_need_their_roles() {
        assert_eq!(page_access("/login"), Access::Open);
        assert_eq!(page_access("/v1/me"), Access::Open);
        assert_eq!(page_access("/credits"), Access::Role(Role::User));
        assert_eq!(page_access("/account"), Access::Role(Role::User));
        assert_eq!(page_access("/review"), Access::Role(Role::Reviewer));
        assert_eq!(page_access("/admin/users"), Access::Role(Role::Admin));
        assert_eq!(page_access("/administrator"), Access::Role(Role::User));
    }

    #[test]
    fn cross_site_posts_are_recognised() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:3000".parse().unwrap());
        assert!(!same_origin(&h, None));
        h.insert(header::ORIGIN, "http://127.0.0.1:3000".parse().unwrap());
        assert!(same_origin(&h, None));
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(!same_origin(&h, None));
        h.insert(header::ORIGIN, "null".parse().unwrap());
        assert!(!same_origin(&h, None));
        // With a public URL, its scheme and host are the one origin.
        let public = Some("https://tollgate.example");
        h.insert(header::HOST, "tollgate.example".parse().unwrap());
        h.insert(header::ORIGIN, "https://tollgate.example".parse().unwrap());
        assert!(same_origin(&h, public));
        h.insert(header::ORIGIN, "http://tollgate.example".parse().unwrap());
        assert!(!same_origin(&h, public), "another scheme");
        h.insert(
            header::ORIGIN,
            "https://tollgate.example.evil".parse().unwrap(),
        );
        assert!(!same_origin(&h, public));
    }
}
