//! `/docs/api`: the `/v1` API for people, rendered on the server from the
//! OpenAPI document the engine generates from its routes. Nothing is fetched
//! from elsewhere; the JSON document itself is one link away.

use super::LoadError;
use crate::data::{
    load_api_reference, ApiField, ApiOperation, ApiReference, ApiResponse, ApiSchema,
};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn ApiDocsPage() -> impl IntoView {
    let reference = Resource::new_blocking(|| (), |_| load_api_reference());
    view! {
        <Title text="API reference" />
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match reference.await {
                    Ok(r) => view! { <Reference r=r /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// Text with `code spans` set as code, as the document writes them.
fn prose(text: &str) -> Vec<AnyView> {
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            let part = part.replace('\n', " ");
            if i % 2 == 1 {
                view! { <code>{part}</code> }.into_any()
            } else {
                view! { {part} }.into_any()
            }
        })
        .collect()
}

fn anchor(kind: &str, name: &str) -> String {
    format!("{kind}-{}", name.replace(['/', '{', '}', '.'], "-"))
}

/// A schema's words, each of our schemas' names in it linked.
fn kind_view(kind: String, schemas: &[String]) -> AnyView {
    let mut parts = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, parts: &mut Vec<AnyView>| {
        if word.is_empty() {
            return;
        }
        let w = std::mem::take(word);
        parts.push(if schemas.contains(&w) {
            let href = format!("#{}", anchor("schema", &w));
            view! { <a href=href>{w}</a> }.into_any()
        } else {
            view! { {w} }.into_any()
        });
    };
    for c in kind.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut parts);
            parts.push(view! { {c.to_string()} }.into_any());
        }
    }
    flush(&mut word, &mut parts);
    view! { <span class="mono">{parts}</span> }.into_any()
}

#[component]
fn Reference(r: ApiReference) -> impl IntoView {
    let names: Vec<String> = r.schemas.iter().map(|s| s.name.clone()).collect();
    let contents = r
        .groups
        .iter()
        .map(|g| {
            let ops = g
                .operations
                .iter()
                .map(|o| {
                    let href = format!("#{}", anchor("op", &o.id));
                    view! {
                        <li><a href=href><span class=format!("method method-{}", o.method.to_lowercase())>{o.method.clone()}</span>" "<span class="mono">{o.path.clone()}</span></a></li>
                    }
                })
                .collect::<Vec<_>>();
            view! { <li><strong>{g.tag.clone()}</strong><ul>{ops}</ul></li> }
        })
        .collect::<Vec<_>>();
    let groups = r
        .groups
        .into_iter()
        .map(|g| {
            let names = names.clone();
            let ops = g
                .operations
                .into_iter()
                .map(move |o| view! { <Operation op=o schemas=names.clone() /> })
                .collect::<Vec<_>>();
            view! {
                <section class="api-group" id=anchor("tag", &g.tag)>
                    <h2>{g.tag.clone()}</h2>
                    <p class="muted">{prose(&g.description)}</p>
                    {ops}
                </section>
            }
        })
        .collect::<Vec<_>>();
    let schemas = r
        .schemas
        .into_iter()
        .map(|s| view! { <Schema s=s schemas=names.clone() /> })
        .collect::<Vec<_>>();
    view! {
        <header class="page-head">
            <h1>{r.title}" API reference"</h1>
            <p class="lede">{prose(&r.description)}</p>
            <p>
                <a class="btn btn-ghost btn-small" href="/v1/openapi.json">"The OpenAPI 3.1 document (JSON)"</a>
                " "
                <a class="btn btn-ghost btn-small" href="/account">"Make an API token"</a>
            </p>
        </header>
        <div class="api-layout">
            <nav class="card api-contents" aria-label="Operations">
                <h2 class="card-title">"Operations"</h2>
                <ul>{contents}</ul>
                <p><a href="#schemas">"Schemas"</a></p>
            </nav>
            <div class="api-main">
                {groups}
                <section class="api-group" id="schemas">
                    <h2>"Schemas"</h2>
                    {schemas}
                </section>
            </div>
        </div>
    }
}

#[component]
fn Operation(op: ApiOperation, schemas: Vec<String>) -> impl IntoView {
    let (summary, details) = match op.summary.split_once("\n\n") {
        Some((s, d)) => (s.to_string(), d.to_string()),
        None => (op.summary.clone(), String::new()),
    };
    let params = (!op.params.is_empty()).then(|| {
        view! { <h4>"Parameters"</h4><Fields fields=op.params.clone() schemas=schemas.clone() /> }
    });
    let body = (!op.body.is_empty()).then(|| {
        let items = op
            .body
            .iter()
            .map(|(media, kind)| {
                view! { <li><span class="mono">{media.clone()}</span>": "{kind_view(kind.clone(), &schemas)}</li> }
            })
            .collect::<Vec<_>>();
        view! { <h4>"Request body"</h4><ul class="plain">{items}</ul> }
    });
    let responses = op
        .responses
        .iter()
        .map(|r| view! { <ResponseRow r=r.clone() schemas=schemas.clone() /> })
        .collect::<Vec<_>>();
    view! {
        <article class="card api-op" id=anchor("op", &op.id)>
            <h3>
                <span class=format!("method method-{}", op.method.to_lowercase())>{op.method.clone()}</span>
                " "<span class="mono">{op.path.clone()}</span>
            </h3>
            <p>{prose(&summary)}</p>
            {(!details.is_empty()).then(|| view! { <p class="muted">{prose(&details)}</p> })}
            <p class="muted small">
                {if op.signed_in { "Needs an API token (Authorization: Bearer tg_…) or a session." } else { "Open to anyone." }}
                " Operation id: "<span class="mono">{op.id.clone()}</span>
            </p>
            {params}
            {body}
            <details class="api-example" data-testid="example">
                <summary class="small">"Example"</summary>
                <pre class="code-block"><code>{op.example.clone()}</code></pre>
            </details>
            <h4>"Responses"</h4>
            <div class="table-wrap">
                <table class="table">
                    <thead><tr><th scope="col">"Status"</th><th scope="col">"Meaning"</th><th scope="col">"Body"</th></tr></thead>
                    <tbody>{responses}</tbody>
                </table>
            </div>
        </article>
    }
}

/// One answer an operation may give: its status, meaning, body and links.
#[component]
fn ResponseRow(r: ApiResponse, schemas: Vec<String>) -> impl IntoView {
    let class = match r.status.chars().next() {
        Some('2') => "status status-ok",
        Some('4') => "status status-client",
        _ => "status status-other",
    };
    let links = (!r.links.is_empty()).then(|| {
        let items = r
            .links
            .iter()
            .map(|l| {
                let href = format!("#{}", anchor("op", l));
                view! { <a class="mono" href=href>{l.clone()}</a>" " }
            })
            .collect::<Vec<_>>();
        view! { <div class="muted small">"Links: "{items}</div> }
    });
    view! {
        <tr>
            <td><span class=class>{r.status.clone()}</span></td>
            <td>{prose(&r.description)}{links}</td>
            <td>{r.schema.clone().map(|k| kind_view(k, &schemas))}</td>
        </tr>
    }
}

#[component]
fn Fields(fields: Vec<ApiField>, schemas: Vec<String>) -> impl IntoView {
    let with_place = fields.iter().any(|f| !f.place.is_empty());
    let rows = fields
        .into_iter()
        .map(|f| {
            view! {
                <tr>
                    <td class="mono">{f.name}{f.required.then_some(" *")}</td>
                    {with_place.then(|| view! { <td>{f.place.clone()}</td> })}
                    <td>{kind_view(f.kind, &schemas)}</td>
                    <td>{prose(&f.description)}</td>
                </tr>
            }
        })
        .collect::<Vec<_>>();
    view! {
        <div class="table-wrap">
            <table class="table">
                <thead>
                    <tr>
                        <th scope="col">"Name"</th>
                        {with_place.then(|| view! { <th scope="col">"In"</th> })}
                        <th scope="col">"Type"</th>
                        <th scope="col">"Description"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
        <p class="muted small">"* required"</p>
    }
}

#[component]
fn Schema(s: ApiSchema, schemas: Vec<String>) -> impl IntoView {
    let body = if s.fields.is_empty() {
        view! { <p>{kind_view(s.kind, &schemas)}</p> }.into_any()
    } else {
        view! { <Fields fields=s.fields schemas=schemas /> }.into_any()
    };
    view! {
        <article class="card api-schema" id=anchor("schema", &s.name)>
            <h3 class="mono">{s.name.clone()}</h3>
            {(!s.description.is_empty()).then(|| view! { <p class="muted">{prose(&s.description)}</p> })}
            {body}
        </article>
    }
}
