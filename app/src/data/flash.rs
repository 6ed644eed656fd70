//! One-time messages: a form handler leaves one in the session, the page it
//! redirects to takes it (and so it is shown once). The message itself is
//! plain data the browser also reads; keeping and taking it is server-only.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum FlashKind {
    Ok,
    Error,
}

/// A one-time message left by a form post for the page it redirects to.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Flash {
    pub kind: FlashKind,
    pub message: String,
    /// A secret to show exactly once (a new API token).
    pub secret: Option<String>,
    /// What the person typed, to fill the form again after an error.
    pub email: Option<String>,
}

#[cfg(feature = "ssr")]
pub use session::*;

#[cfg(feature = "ssr")]
mod session {
    use super::{Flash, FlashKind};
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
    /// session row: the server keeps no copy. The cookie is bound to the
    /// session that made the secret: it carries a nonce the session holds too,
    /// so a cookie planted from a sibling subdomain, or left for the next
    /// person on a shared browser, shows nothing (issue 29, 7). Over https its
    /// name has the `__Host-` prefix: only this host, over https, may set it.
    const SECRET_COOKIE: &str = "tollgate_once";
    const SECRET_COOKIE_HOST: &str = "__Host-tollgate_once";
    /// Where the session keeps the nonce of the secret on its way.
    const SECRET_NONCE_KEY: &str = "tollgate.once";
    /// How long the cookie lives if the page never comes.
    const SECRET_COOKIE_SECONDS: u32 = 120;

    fn secret_cookie(secure: bool) -> &'static str {
        if secure {
            SECRET_COOKIE_HOST
        } else {
            SECRET_COOKIE
        }
    }

    fn secret_set_cookie(
        value: &str,
        max_age: u32,
        secure: bool,
    ) -> Option<axum::http::HeaderValue> {
        let cookie = format!(
            "{}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Strict{}",
            secret_cookie(secure),
            if secure { "; Secure" } else { "" }
        );
        axum::http::HeaderValue::from_str(&cookie).ok()
    }

    /// A redirect to `to` carrying `secret` for the next page of this session.
    pub async fn redirect_with_secret(
        session: &Session,
        to: &str,
        secret: &str,
        secure: bool,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        if let Err(e) = session.insert(SECRET_NONCE_KEY, &nonce).await {
            tracing::warn!(error = %e, "could not bind a new secret to the session");
        }
        let mut response = axum::response::Redirect::to(to).into_response();
        if let Some(v) =
            secret_set_cookie(&format!("{nonce}.{secret}"), SECRET_COOKIE_SECONDS, secure)
        {
            response
                .headers_mut()
                .append(axum::http::header::SET_COOKIE, v);
        }
        response
    }

    /// The secret on its way to this session's page, if the cookie holds one
    /// of ours under the nonce this session keeps. Either way the nonce is
    /// spent: a secret is shown once.
    pub async fn take_secret(
        session: &Session,
        headers: &axum::http::HeaderMap,
        secure: bool,
    ) -> Option<String> {
        let (nonce, secret) = secret_from(headers, secure)?;
        let kept: Option<String> = session.remove(SECRET_NONCE_KEY).await.ok().flatten();
        (kept.as_deref() == Some(nonce.as_str())).then_some(secret)
    }

    /// The secret cookie's nonce and value, if they look like ours.
    fn secret_from(headers: &axum::http::HeaderMap, secure: bool) -> Option<(String, String)> {
        let name = secret_cookie(secure);
        let value = headers
            .get_all(axum::http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())?;
        let (nonce, secret) = value.split_once('.')?;
        let nonce_ok = nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit());
        let secret_ok = (secret.starts_with("tg_") || secret.starts_with("whsec_"))
            && secret.len() <= 200
            && secret
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=_-".contains(&b));
        (nonce_ok && secret_ok).then(|| (nonce.to_string(), secret.to_string()))
    }

    /// Whether the request carries a secret cookie at all (to clear it).
    pub fn has_secret(headers: &axum::http::HeaderMap, secure: bool) -> bool {
        let name = secret_cookie(secure);
        headers
            .get_all(axum::http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .any(|c| c.trim().split_once('=').is_some_and(|(k, _)| k == name))
    }

    /// Clears the secret cookie on the response being rendered.
    pub fn clear_secret(secure: bool) {
        let Some(response) = leptos::prelude::use_context::<leptos_axum::ResponseOptions>() else {
            return;
        };
        if let Some(v) = secret_set_cookie("", 0, secure) {
            response.append_header(axum::http::header::SET_COOKIE, v);
        }
    }
}
