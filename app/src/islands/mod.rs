//! Islands: the only parts of a page that ship code to the browser.

mod composer;
mod result;

pub use composer::EditComposer;
pub use result::{BeforeAfter, LiveStatus, VersionCompare};

use leptos::prelude::*;

/// A button that copies a secret shown once (a new token, a signing
/// secret) to the clipboard, and says when it did.
#[island]
pub fn CopyButton(text: String) -> impl IntoView {
    let (copied, set_copied) = signal(None::<bool>);
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let text = text.clone();
            leptos::task::spawn_local(async move {
                let done = match web_sys::window() {
                    Some(w) => {
                        let promise = w.navigator().clipboard().write_text(&text);
                        wasm_bindgen_futures::JsFuture::from(promise).await.is_ok()
                    }
                    None => false,
                };
                set_copied.set(Some(done));
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (&text, set_copied);
    };
    view! {
        <button type="button" class="btn btn-ghost btn-small" data-testid="copy" on:click=copy>
            {move || match copied.get() {
                None => "Copy",
                Some(true) => "Copied",
                Some(false) => "Select and copy it by hand",
            }}
        </button>
    }
}

/// A password input with a Show/Hide button. Without JavaScript it is a
/// plain password input.
#[island]
pub fn PasswordField(
    name: String,
    label: String,
    #[prop(optional)] autocomplete: Option<String>,
    #[prop(optional)] hint: Option<String>,
    #[prop(optional)] minlength: Option<u32>,
) -> impl IntoView {
    let (shown, set_shown) = signal(false);
    let id = format!("field-{name}");
    let hint_id = format!("{id}-hint");
    let described = hint.as_ref().map(|_| hint_id.clone());
    view! {
        <div class="field">
            <label for=id.clone()>{label}</label>
            <div class="password-row">
                <input
                    id=id.clone()
                    name=name
                    type=move || if shown.get() { "text" } else { "password" }
                    autocomplete=autocomplete
                    minlength=minlength
                    aria-describedby=described
                    required
                />
                <button
                    type="button"
                    class="btn btn-ghost btn-small"
                    aria-controls=id
                    aria-pressed=move || if shown.get() { "true" } else { "false" }
                    on:click=move |_| set_shown.update(|s| *s = !*s)
                >
                    {move || if shown.get() { "Hide" } else { "Show" }}
                </button>
            </div>
            {hint.map(|h| view! { <p class="hint" id=hint_id>{h}</p> })}
        </div>
    }
}
