//! New edit: the page around the composer island.

use super::LoadError;
use crate::data::load_composer;
use crate::islands::EditComposer;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn NewEditPage() -> impl IntoView {
    // `?from=<job>`: change an earlier edit and order again.
    let from = leptos_router::hooks::use_query_map()
        .get_untracked()
        .get("from");
    let data = Resource::new_blocking(move || from.clone(), load_composer);
    view! {
        <Title text="New edit" />
        <header class="page-head">
            <p class="crumbs"><a href="/edits">"My edits"</a></p>
            <h1>"New edit"</h1>
            <p class="lede">"Upload a photo, choose what to change and a handmade medium. You see the price before you pay."</p>
        </header>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(c) => view! { <EditComposer composer=c /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}
