//! The New edit composer: upload a photo, choose what to change (painting
//! the area with a brush when it is `area`), pick a medium and a strength,
//! see the price from the same `quote()` the server charges with, and
//! submit once. The idempotency key was made when the page was rendered, so
//! a double click or a resubmit after a network error makes one job.

use crate::data::Composer;
use leptos::prelude::*;
use leptos::task::spawn_local;
use serde_json::{json, Value};
use tollgate::model::{
    quote, AssetId, ImageEdit, JobRequest, Strength, Target, TargetKind, STYLES,
};
use wasm_bindgen::Clamped;
use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement, ImageData};

/// Undo steps kept for the brush (each is a full copy of the mask).
const UNDO_STEPS_MAX: usize = 10;
/// The mask's longest side. It is scaled to the photo when used; capping it
/// bounds the memory undo needs (10 × 1280 × 1280 × 4 bytes at most).
const MASK_SIDE_MAX: u32 = 1280;

/// The mask canvas size for a photo: the photo's own, scaled down to fit.
fn mask_size(w: u32, h: u32) -> (u32, u32) {
    let long = w.max(h).max(1);
    if long <= MASK_SIDE_MAX {
        (w.max(1), h.max(1))
    } else {
        let scale = f64::from(MASK_SIDE_MAX) / f64::from(long);
        (
            (f64::from(w) * scale).round().max(1.0) as u32,
            (f64::from(h) * scale).round().max(1.0) as u32,
        )
    }
}

/// A copy of the mask's pixels, for undo. Plain bytes (not `ImageData`) so
/// the island's state can be created on the server too.
#[derive(Clone)]
struct Snapshot {
    rgba: Vec<u8>,
    width: u32,
    height: u32,
}
/// Colour of painted strokes; the mask is wherever alpha is non-zero.
const BRUSH_COLOUR: &str = "#ff2d6f";

#[derive(Clone, Debug, PartialEq)]
struct Photo {
    asset_id: String,
    url: String,
    width: u32,
    height: u32,
}

/// Sends a POST with the session cookie; returns status and JSON body.
async fn post(
    url: &str,
    content_type: &str,
    body: &wasm_bindgen::JsValue,
    key: Option<&str>,
) -> Result<(u16, Value), String> {
    let fail = |e: wasm_bindgen::JsValue| format!("{e:?}");
    let window = web_sys::window().ok_or("no window")?;
    let headers = web_sys::Headers::new().map_err(fail)?;
    headers.set("content-type", content_type).map_err(fail)?;
    if let Some(k) = key {
        headers.set("idempotency-key", k).map_err(fail)?;
    }
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_body(body);
    init.set_headers(&headers);
    init.set_credentials(web_sys::RequestCredentials::SameOrigin);
    let resp = wasm_bindgen_futures::JsFuture::from(window.fetch_with_str_and_init(url, &init))
        .await
        .map_err(|_| "the network failed; check your connection and try again".to_string())?;
    let resp: web_sys::Response = resp.dyn_into().map_err(fail)?;
    let text = wasm_bindgen_futures::JsFuture::from(resp.text().map_err(fail)?)
        .await
        .map_err(fail)?;
    let json = serde_json::from_str(&text.as_string().unwrap_or_default()).unwrap_or(Value::Null);
    Ok((resp.status(), json))
}

fn error_message(body: &Value, fallback: &str) -> String {
    body["error"]["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| fallback.to_string())
}

fn context(canvas: &HtmlCanvasElement) -> Option<CanvasRenderingContext2d> {
    canvas.get_context("2d").ok().flatten()?.dyn_into().ok()
}

/// The mask as a PNG blob, through the browser's own encoder.
async fn mask_blob(canvas: &HtmlCanvasElement) -> Result<web_sys::Blob, String> {
    let url = canvas
        .to_data_url_with_type("image/png")
        .map_err(|e| format!("{e:?}"))?;
    let window = web_sys::window().ok_or("no window")?;
    let resp = wasm_bindgen_futures::JsFuture::from(window.fetch_with_str(&url))
        .await
        .map_err(|e| format!("{e:?}"))?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|e| format!("{e:?}"))?;
    let blob = wasm_bindgen_futures::JsFuture::from(resp.blob().map_err(|e| format!("{e:?}"))?)
        .await
        .map_err(|e| format!("{e:?}"))?;
    blob.dyn_into().map_err(|e| format!("{e:?}"))
}

/// Why an order cannot go through yet, in words that say what to do;
/// `None` when it can. The most useful first: a photo, then the area,
/// then money the person can do nothing about from here.
fn order_blocker(
    has_photo: bool,
    unpainted_area: bool,
    (balance, cost): (i64, i64),
    spending_paused: bool,
) -> Option<String> {
    if !has_photo {
        return Some("Upload a photo to order an edit.".into());
    }
    if unpainted_area {
        return Some("Paint the area you want to change.".into());
    }
    if balance < cost {
        return Some(format!(
            "This edit costs {cost} credits and you have {balance}. Ask your admin for credits."
        ));
    }
    if spending_paused {
        return Some(
            "Today's spending is paused, so edits cannot be ordered right now. Try again tomorrow, or ask your admin."
                .into(),
        );
    }
    None
}

/// The order form: photo, target, medium, strength, price and the order.
///
/// Long, and the next to split (issue 30): one island whose parts all read
/// and write the same signals (the photo, the painted mask, the price and
/// the upload and order states); the split is into child components that
/// take those signals, which has not been done yet.
#[island]
pub fn EditComposer(composer: Composer) -> impl IntoView {
    let Composer {
        catalogue,
        idempotency_key,
        balance,
        prefill,
        spending_paused,
    } = composer;
    let catalogue = StoredValue::new(catalogue);
    let key = StoredValue::new(idempotency_key);

    let questions = prefill
        .as_ref()
        .map(|p| p.questions.clone())
        .unwrap_or_default();
    let photo = RwSignal::new(prefill.as_ref().map(|p| Photo {
        asset_id: p.asset_id.clone(),
        url: format!("/v1/assets/{}/content", p.asset_id),
        width: p.width,
        height: p.height,
    }));
    let uploading = RwSignal::new(false);
    let upload_error = RwSignal::new(None::<String>);
    let target = RwSignal::new(prefill.as_ref().map_or(TargetKind::Pet, |p| p.target));
    let description = RwSignal::new(
        prefill
            .as_ref()
            .map(|p| p.description.clone())
            .unwrap_or_default(),
    );
    let medium = RwSignal::new(
        prefill
            .as_ref()
            .map_or(STYLES[0].id.to_string(), |p| p.style.clone()),
    );
    let strength = RwSignal::new(prefill.as_ref().map_or(Strength::Balanced, |p| p.strength));
    let brush = RwSignal::new(40u32);
    let erasing = RwSignal::new(false);
    let strokes = RwSignal::new(0usize);
    let drawing = StoredValue::new(None::<(f64, f64)>);
    let undo = StoredValue::new(Vec::<Snapshot>::new());
    let submitting = RwSignal::new(false);
    let submit_error = RwSignal::new(None::<String>);
    let canvas_ref: NodeRef<leptos::html::Canvas> = NodeRef::new();

    // The price, from the very function that charges.
    let price = Memo::new(move |_| {
        let request = JobRequest::ImageEdit(ImageEdit {
            source: AssetId(uuid::Uuid::nil()),
            target: Target {
                kind: target.get(),
                description: String::new(),
                mask: None,
            },
            style: medium.get(),
            strength: strength.get(),
            webhook_url: None,
        });
        catalogue.with_value(|c| quote(c, &request))
    });
    // What would make an order fail, said before the click (issue 33, 8).
    let blocker = Memo::new(move |_| {
        order_blocker(
            photo.with(Option::is_some),
            target.get() == TargetKind::Area && strokes.get() == 0,
            (balance, price.get().credits.get()),
            spending_paused,
        )
    });

    let upload = move |file: web_sys::File| {
        let content_type = file.type_();
        if !["image/png", "image/jpeg", "image/webp"].contains(&content_type.as_str()) {
            upload_error.set(Some("Choose a PNG, JPEG or WebP photo.".into()));
            return;
        }
        uploading.set(true);
        upload_error.set(None);
        spawn_local(async move {
            match post("/v1/assets", &content_type, &file, None).await {
                Ok((201, body)) => {
                    let url = web_sys::Url::create_object_url_with_blob(&file).unwrap_or_default();
                    let (w, h) = (
                        body["width"].as_u64().unwrap_or(1) as u32,
                        body["height"].as_u64().unwrap_or(1) as u32,
                    );
                    undo.update_value(|u| u.clear());
                    strokes.set(0);
                    photo.set(Some(Photo {
                        asset_id: body["id"].as_str().unwrap_or_default().to_string(),
                        url,
                        width: w,
                        height: h,
                    }));
                }
                Ok((_, body)) => upload_error.set(Some(error_message(
                    &body,
                    "The photo could not be uploaded.",
                ))),
                Err(e) => upload_error.set(Some(e)),
            }
            uploading.set(false);
        });
    };

    let on_file = move |ev: web_sys::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        if let Some(file) = input.files().and_then(|f| f.get(0)) {
            upload(file);
        }
    };
    let on_drop = move |ev: web_sys::DragEvent| {
        ev.prevent_default();
        if let Some(file) = ev
            .data_transfer()
            .and_then(|d| d.files())
            .and_then(|f| f.get(0))
        {
            upload(file);
        }
    };

    // ---- the brush ----
    let point = move |ev: &web_sys::PointerEvent| -> Option<(f64, f64, HtmlCanvasElement)> {
        let canvas = canvas_ref.get()?;
        let rect = canvas.get_bounding_client_rect();
        if rect.width() <= 0.0 {
            return None;
        }
        let scale = f64::from(canvas.width()) / rect.width();
        Some((
            (f64::from(ev.client_x()) - rect.left()) * scale,
            (f64::from(ev.client_y()) - rect.top()) * scale,
            canvas,
        ))
    };
    let stroke = move |canvas: &HtmlCanvasElement, from: (f64, f64), to: (f64, f64)| {
        let Some(ctx) = context(canvas) else { return };
        let rect = canvas.get_bounding_client_rect();
        let scale = if rect.width() > 0.0 {
            f64::from(canvas.width()) / rect.width()
        } else {
            1.0
        };
        let _ = ctx.set_global_composite_operation(if erasing.get_untracked() {
            "destination-out"
        } else {
            "source-over"
        });
        ctx.set_stroke_style_str(BRUSH_COLOUR);
        ctx.set_line_width(f64::from(brush.get_untracked()) * scale);
        ctx.set_line_cap("round");
        ctx.set_line_join("round");
        ctx.begin_path();
        ctx.move_to(from.0, from.1);
        ctx.line_to(to.0 + 0.01, to.1);
        ctx.stroke();
    };
    let on_down = move |ev: web_sys::PointerEvent| {
        let Some((x, y, canvas)) = point(&ev) else {
            return;
        };
        ev.prevent_default();
        let _ = canvas.set_pointer_capture(ev.pointer_id());
        if let Some(ctx) = context(&canvas) {
            if let Ok(data) = ctx.get_image_data(
                0.0,
                0.0,
                f64::from(canvas.width()),
                f64::from(canvas.height()),
            ) {
                let snapshot = Snapshot {
                    rgba: data.data().0,
                    width: data.width(),
                    height: data.height(),
                };
                undo.update_value(|u| {
                    u.push(snapshot);
                    if u.len() > UNDO_STEPS_MAX {
                        u.remove(0);
                    }
                });
            }
        }
        drawing.set_value(Some((x, y)));
        stroke(&canvas, (x, y), (x, y));
    };
    let on_move = move |ev: web_sys::PointerEvent| {
        let Some(from) = drawing.get_value() else {
            return;
        };
        let Some((x, y, canvas)) = point(&ev) else {
            return;
        };
        stroke(&canvas, from, (x, y));
        drawing.set_value(Some((x, y)));
    };
    let on_up = move |_ev: web_sys::PointerEvent| {
        if drawing.get_value().is_some() {
            drawing.set_value(None);
            strokes.update(|s| *s += 1);
        }
    };
    let on_undo = move |_| {
        let Some(canvas) = canvas_ref.get() else {
            return;
        };
        let Some(ctx) = context(&canvas) else { return };
        if let Some(previous) = undo.try_update_value(|u| u.pop()).flatten() {
            if let Ok(data) = ImageData::new_with_u8_clamped_array_and_sh(
                Clamped(&previous.rgba),
                previous.width,
                previous.height,
            ) {
                let _ = ctx.put_image_data(&data, 0.0, 0.0);
            }
            strokes.update(|s| *s = s.saturating_sub(1));
        }
    };
    let on_clear = move |_| {
        let Some(canvas) = canvas_ref.get() else {
            return;
        };
        if let Some(ctx) = context(&canvas) {
            ctx.clear_rect(
                0.0,
                0.0,
                f64::from(canvas.width()),
                f64::from(canvas.height()),
            );
        }
        undo.update_value(|u| u.clear());
        strokes.set(0);
    };

    // ---- submit ----
    let on_submit = move |ev: web_sys::SubmitEvent| {
        ev.prevent_default();
        if submitting.get_untracked() {
            return;
        }
        // The button is off while something blocks the order; a form
        // submitted anyway (Enter in a field) stops here, and says why.
        let (Some(p), None) = (photo.get_untracked(), blocker.get_untracked()) else {
            return;
        };
        let kind = target.get_untracked();
        submitting.set(true);
        submit_error.set(None);
        spawn_local(async move {
            let result: Result<String, String> = async {
                let mask = if kind == TargetKind::Area {
                    let canvas = canvas_ref.get_untracked().ok_or("the brush is not ready")?;
                    let blob = mask_blob(&canvas).await?;
                    match post("/v1/assets", "image/png", &blob, None).await? {
                        (201, body) => Some(body["id"].as_str().unwrap_or_default().to_string()),
                        (_, body) => return Err(error_message(&body, "The painted area could not be uploaded.")),
                    }
                } else {
                    None
                };
                let mut target_json = json!({"kind": kind.as_str(), "description": description.get_untracked()});
                if let Some(m) = mask {
                    target_json["mask"] = json!(m);
                }
                let body = json!({
                    "kind": "image_edit", "source": p.asset_id, "target": target_json,
                    "style": medium.get_untracked(), "strength": strength.get_untracked().as_str(),
                });
                let key = key.get_value();
                match post("/v1/jobs", "application/json", &body.to_string().into(), Some(&key)).await? {
                    (201 | 202, job) => Ok(job["id"].as_str().unwrap_or_default().to_string()),
                    (409, _) => Err("This form was already used for another edit. Reload the page to start a new one.".into()),
                    (_, body) => Err(error_message(&body, "The edit could not be ordered.")),
                }
            }
            .await;
            match result {
                Ok(id) => {
                    if let Some(w) = web_sys::window() {
                        let _ = w.location().set_href(&format!("/edits/{id}"));
                    }
                }
                Err(e) => {
                    submit_error.set(Some(e));
                    submitting.set(false);
                }
            }
        });
    };

    let gallery = STYLES
        .iter()
        .map(|s| {
            let id = s.id;
            let swatch = format!(
                "background: linear-gradient(135deg, {a} 0 33%, {b} 33% 66%, {c} 66% 100%)",
                a = s.swatch[0],
                b = s.swatch[1],
                c = s.swatch[2]
            );
            view! {
                <label class="medium" class:selected=move || medium.get() == id>
                    <input type="radio" name="style" value=id
                        prop:checked=move || medium.get() == id
                        on:change=move |_| medium.set(id.to_string()) />
                    <span class=format!("swatch swatch-{id}") style=swatch aria-hidden="true"></span>
                    <span class="medium-name">{s.name}</span>
                    <span class="medium-desc">{s.description}</span>
                </label>
            }
        })
        .collect_view();

    view! {
        <form class="composer" on:submit=on_submit novalidate>
            {(!questions.is_empty()).then(|| view! {
                <div class="callout warning" data-testid="prefill-questions">
                    <strong>"Your last order with this photo stopped before anything was paid for. It asked:"</strong>
                    <ul>{questions.into_iter().map(|q| view! { <li>{q}</li> }).collect_view()}</ul>
                    <p class="small muted">"The settings are filled in from that order: change what the questions point at, then order again."</p>
                </div>
            })}
            <section class="card step">
                <h2 class="card-title"><span class="step-no">"1"</span>"Your photo"</h2>
                <label class="dropzone" class:has-photo=move || photo.get().is_some()
                    on:dragover=|ev: web_sys::DragEvent| ev.prevent_default()
                    on:drop=on_drop>
                    <input type="file" accept="image/png,image/jpeg,image/webp" class="visually-hidden"
                        data-testid="photo-input" on:change=on_file />
                    {move || match photo.get() {
                        None => view! {
                            <span class="dropzone-text">
                                <strong>"Drop a photo here"</strong>
                                " or click to choose one (PNG, JPEG or WebP, up to 20 MB)"
                            </span>
                        }.into_any(),
                        Some(_) => view! { <span class="dropzone-text">"Choose another photo"</span> }.into_any(),
                    }}
                </label>
                {move || uploading.get().then(|| view! { <p class="muted" role="status">"Uploading…"</p> })}
                {move || upload_error.get().map(|e| view! { <div class="flash flash-error" role="alert"><p>{e}</p></div> })}
            </section>

            <section class="card step">
                <h2 class="card-title"><span class="step-no">"2"</span>"What to change"</h2>
                <div class="segmented" role="radiogroup" aria-label="What to change">
                    {TargetKind::ALL.map(|k| view! {
                        <label class="segment" class:selected=move || target.get() == k>
                            <input type="radio" name="target" value=k.as_str()
                                prop:checked=move || target.get() == k
                                on:change=move |_| target.set(k) />
                            {k.label()}
                        </label>
                    }).collect_view()}
                </div>
                <div class="field">
                    <label for="target-description">"Describe it (optional)"</label>
                    <input id="target-description" type="text" maxlength="500" placeholder="e.g. the dog on the left"
                        prop:value=move || description.get()
                        on:input=move |ev| description.set(event_target_value(&ev)) />
                </div>
                {move || photo.get().map(|p| {
                    let (mask_w, mask_h) = mask_size(p.width, p.height);
                    // Sized so the photo and the mask canvas cover exactly the
                    // same box: painted strokes land where they were drawn.
                    let size = format!(
                        "aspect-ratio: {w} / {h}; width: min(100%, calc(65vh * {w} / {h}))",
                        w = p.width,
                        h = p.height
                    );
                    view! {
                        <div class="paint-stage" class:painting=move || target.get() == TargetKind::Area style=size>
                            <img src=p.url alt="Your photo" />
                            <canvas node_ref=canvas_ref width=mask_w height=mask_h
                                data-testid="mask-canvas"
                                aria-label="Paint the area to change"
                                on:pointerdown=on_down on:pointermove=on_move
                                on:pointerup=on_up on:pointercancel=on_up on:pointerleave=on_up></canvas>
                        </div>
                    }
                })}
                {move || (photo.get().is_some() && target.get() == TargetKind::Area).then(|| view! {
                    <div class="brush-tools">
                        <label class="brush-size">
                            "Brush"
                            <input type="range" min="5" max="160" step="1"
                                prop:value=move || brush.get().to_string()
                                on:input=move |ev| brush.set(event_target_value(&ev).parse().unwrap_or(40)) />
                        </label>
                        <button type="button" class="btn btn-ghost btn-small" aria-pressed=move || erasing.get().to_string()
                            on:click=move |_| erasing.update(|e| *e = !*e)>
                            {move || if erasing.get() { "Eraser (on)" } else { "Eraser" }}
                        </button>
                        <button type="button" class="btn btn-ghost btn-small" on:click=on_undo
                            disabled=move || strokes.get() == 0>"Undo"</button>
                        <button type="button" class="btn btn-ghost btn-small" on:click=on_clear>"Clear"</button>
                        <span class="muted small" data-testid="stroke-count">
                            {move || match strokes.get() {
                                0 => "Paint over what should change.".to_string(),
                                1 => "1 stroke".to_string(),
                                n => format!("{n} strokes"),
                            }}
                        </span>
                    </div>
                })}
            </section>

            <section class="card step">
                <h2 class="card-title"><span class="step-no">"3"</span>"Medium"</h2>
                <div class="gallery" role="radiogroup" aria-label="Medium">{gallery}</div>
            </section>

            <section class="card step">
                <h2 class="card-title"><span class="step-no">"4"</span>"Strength"</h2>
                <div class="segmented" role="radiogroup" aria-label="Strength">
                    {Strength::ALL.map(|s| view! {
                        <label class="segment" class:selected=move || strength.get() == s>
                            <input type="radio" name="strength" value=s.as_str()
                                prop:checked=move || strength.get() == s
                                on:change=move |_| strength.set(s) />
                            {s.label()}
                        </label>
                    }).collect_view()}
                </div>
            </section>

            <div class="checkout card">
                <div class="price">
                    <span class="price-credits" data-testid="price">{move || format!("{} credits", price.get().credits)}</span>
                    <span class="muted small">{move || format!("You have {balance}. Provider estimate {}", price.get().estimated_usd.dollars())}</span>
                </div>
                {move || blocker.get().map(|b| view! { <p class="order-blocker" data-testid="order-blocker" role="status">{b}</p> })}
                {move || submit_error.get().map(|e| view! { <div class="flash flash-error" role="alert"><p>{e}</p></div> })}
                <button type="submit" class="btn btn-primary btn-large" data-testid="submit"
                    disabled=move || submitting.get() || uploading.get() || blocker.get().is_some()>
                    {move || if submitting.get() { "Ordering…".to_string() } else { format!("Order for {} credits", price.get().credits) }}
                </button>
            </div>
        </form>
    }
}
