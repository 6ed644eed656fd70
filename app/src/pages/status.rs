//! The pages that say no: 404 and 403, with the right status code.

use leptos::prelude::*;
use leptos_meta::Title;

#[cfg(feature = "ssr")]
pub(super) fn set_status(code: u16) {
    if let (Some(resp), Ok(status)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        axum::http::StatusCode::from_u16(code),
    ) {
        resp.set_status(status);
    }
}

#[component]
pub fn NotFoundPage() -> impl IntoView {
    #[cfg(feature = "ssr")]
    set_status(404);
    view! {
        <Title text="Not found" />
        <section class="card notice">
            <h1>"Page not found"</h1>
            <p class="lede">"There is nothing at this address."</p>
            <a class="btn btn-primary" href="/edits">"Go to My edits"</a>
        </section>
    }
}

#[component]
pub fn ForbiddenPage() -> impl IntoView {
    #[cfg(feature = "ssr")]
    set_status(403);
    view! {
        <Title text="Not allowed" />
        <section class="card notice">
            <h1>"Not allowed"</h1>
            <p class="lede">"Your role does not include this page. Ask an admin if you need it."</p>
            <a class="btn btn-primary" href="/edits">"Go to My edits"</a>
        </section>
    }
}
