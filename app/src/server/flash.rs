//! One-time messages: a form handler leaves one in the session, the page it
//! redirects to takes it (and so it is shown once).

use crate::data::{Flash, FlashKind};
use tower_sessions::Session;

const KEY: &str = "tollgate.flash";

pub async fn set(session: &Session, flash: Flash) {
    if let Err(e) = session.insert(KEY, flash).await {
        tracing::warn!(error = %e, "could not store a flash message");
    }
}

pub async fn ok(session: &Session, message: impl Into<String>) {
    set(
        session,
        Flash {
            kind: FlashKind::Ok,
            message: message.into(),
            secret: None,
            email: None,
        },
    )
    .await
}

pub async fn error(session: &Session, message: impl Into<String>) {
    set(
        session,
        Flash {
            kind: FlashKind::Error,
            message: message.into(),
            secret: None,
            email: None,
        },
    )
    .await
}

/// Takes the flash of the current request's session, inside a server function.
pub async fn take() -> Option<Flash> {
    let session = leptos_axum::extract::<Session>().await.ok()?;
    session.remove::<Flash>(KEY).await.ok().flatten()
}

/// A new secret (an API token, a webhook secret) goes to the page that
/// shows it in a short-lived cookie of the browser's, never into the
/// session row: the server keeps no copy. The page takes it and clears it.
pub const SECRET_COOKIE: &str = "tollgate_once";
/// How long the cookie lives if the page never comes.
const SECRET_COOKIE_SECONDS: u32 = 120;

/// A redirect to `to` carrying `secret` for the next page only.
pub fn redirect_with_secret(to: &str, secret: &str, secure: bool) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    use axum::response::IntoResponse;
    let mut response = axum::response::Redirect::to(to).into_response();
    let cookie = format!(
        "{SECRET_COOKIE}={secret}; Max-Age={SECRET_COOKIE_SECONDS}; Path=/; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// The secret cookie's value, if it looks like one of ours.
pub fn secret_from(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == SECRET_COOKIE)
        .map(|(_, v)| v.to_string())
        .filter(|v| {
            (v.starts_with("tg_") || v.starts_with("whsec_"))
                && v.len() <= 200
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+/=_-".contains(&b))
        })
}

/// Clears the secret cookie on the response being rendered.
pub fn clear_secret(secure: bool) {
    use axum::http::{header, HeaderValue};
    let Some(response) = leptos::prelude::use_context::<leptos_axum::ResponseOptions>() else {
        return;
    };
    let cookie = format!(
        "{SECRET_COOKIE}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.append_header(header::SET_COOKIE, v);
    }
}
