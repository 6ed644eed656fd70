//! The result of an edit: a before/after slider, and a light poll that
//! refreshes the page when a running job changes state.

use leptos::prelude::*;

/// The original and the edit, one over the other; the slider reveals the edit.
#[island]
pub fn BeforeAfter(before: String, after: String) -> impl IntoView {
    let (position, set_position) = signal(50u32);
    view! {
        <div class="before-after">
            <img src=before alt="Before: your photo" class="ba-image" />
            <div class="ba-after" style=move || format!("clip-path: inset(0 0 0 {}%)", position.get())>
                <img src=after alt="After: the edit" class="ba-image" data-testid="result-image" />
            </div>
            <div class="ba-handle" style=move || format!("left: {}%", position.get()) aria-hidden="true"></div>
            <input class="ba-range" type="range" min="0" max="100" step="1"
                aria-label="Slide to compare before and after"
                prop:value=move || position.get().to_string()
                on:input=move |ev| set_position.set(event_target_value(&ev).parse().unwrap_or(50)) />
            <span class="ba-label ba-label-before" aria-hidden="true">"Before"</span>
            <span class="ba-label ba-label-after" aria-hidden="true">"After"</span>
        </div>
    }
}

/// Any two versions of an edit (the photo, the original edit, each repair)
/// under one slider: pick the left and the right, slide between them.
#[island]
pub fn VersionCompare(
    labels: Vec<String>,
    urls: Vec<String>,
    left: usize,
    right: usize,
) -> impl IntoView {
    let (position, set_position) = signal(50u32);
    let (a, set_a) = signal(left.min(urls.len().saturating_sub(1)));
    let (b, set_b) = signal(right.min(urls.len().saturating_sub(1)));
    let urls = StoredValue::new(urls);
    let labels = StoredValue::new(labels);
    let url = move |i: usize| urls.with_value(|u| u.get(i).cloned().unwrap_or_default());
    let label = move |i: usize| labels.with_value(|l| l.get(i).cloned().unwrap_or_default());
    let options = move |selected: ReadSignal<usize>| {
        labels.with_value(|l| {
            l.iter()
                .enumerate()
                .map(|(i, name)| {
                    view! { <option value=i.to_string() selected=move || selected.get() == i>{name.clone()}</option> }
                })
                .collect_view()
        })
    };
    view! {
        <div class="version-compare" data-testid="version-compare">
            <div class="compare-pickers">
                <label>"Left "
                    <select data-testid="compare-left" on:change=move |ev| set_a.set(event_target_value(&ev).parse().unwrap_or(0))>
                        {options(a)}
                    </select>
                </label>
                <label>"Right "
                    <select data-testid="compare-right" on:change=move |ev| set_b.set(event_target_value(&ev).parse().unwrap_or(0))>
                        {options(b)}
                    </select>
                </label>
            </div>
            <div class="before-after">
                <img src=move || url(a.get()) alt=move || label(a.get()) class="ba-image" />
                <div class="ba-after" style=move || format!("clip-path: inset(0 0 0 {}%)", position.get())>
                    <img src=move || url(b.get()) alt=move || label(b.get()) class="ba-image" data-testid="result-image" />
                </div>
                <div class="ba-handle" style=move || format!("left: {}%", position.get()) aria-hidden="true"></div>
                <input class="ba-range" type="range" min="0" max="100" step="1"
                    aria-label="Slide to compare the two versions"
                    prop:value=move || position.get().to_string()
                    on:input=move |ev| set_position.set(event_target_value(&ev).parse().unwrap_or(50)) />
                <span class="ba-label ba-label-before" aria-hidden="true">{move || label(a.get())}</span>
                <span class="ba-label ba-label-after" aria-hidden="true">{move || label(b.get())}</span>
            </div>
        </div>
    }
}

/// While a job is queued or running: polls its status every two seconds
/// (for at most ten minutes) and reloads the page when it changes.
#[island]
pub fn LiveStatus(job_id: String, status: String) -> impl IntoView {
    Effect::new(move |_| {
        let (job_id, status) = (job_id.clone(), status.clone());
        let polls = std::rc::Rc::new(std::cell::Cell::new(0u32));
        let _ = set_interval_with_handle(
            move || {
                polls.set(polls.get() + 1);
                if polls.get() > 300 {
                    return;
                }
                let (job_id, status) = (job_id.clone(), status.clone());
                leptos::task::spawn_local(async move {
                    if let Some(now) = fetch_status(&job_id).await {
                        if now != status {
                            if let Some(w) = web_sys::window() {
                                let _ = w.location().reload();
                            }
                        }
                    }
                });
            },
            std::time::Duration::from_secs(2),
        );
    });
    view! {
        <p class="live" role="status" aria-live="polite">
            <span class="spinner" aria-hidden="true"></span>
            "Working on it. This page updates by itself."
        </p>
    }
}

async fn fetch_status(job_id: &str) -> Option<String> {
    use wasm_bindgen::JsCast;
    let window = web_sys::window()?;
    let resp =
        wasm_bindgen_futures::JsFuture::from(window.fetch_with_str(&format!("/v1/jobs/{job_id}")))
            .await
            .ok()?;
    let resp: web_sys::Response = resp.dyn_into().ok()?;
    let text = wasm_bindgen_futures::JsFuture::from(resp.text().ok()?)
        .await
        .ok()?
        .as_string()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["status"].as_str().map(str::to_string)
}
