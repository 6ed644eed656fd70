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
