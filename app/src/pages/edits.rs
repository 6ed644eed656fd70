//! My edits (a list with status and thumbnails) and one edit's detail.

use super::{LoadError, Pager, Timeline};
use crate::data::{
    load_job_detail, my_jobs, AttemptRow, EventRow, JobDetail, JobRow, LineageView, ParkedRow,
    StoryRow, VersionView,
};
use crate::islands::{BeforeAfter, LiveStatus, VersionCompare};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use tollgate::model::{style, AttemptState, ErrorClass, JobRequest, JobStatus};

/// A job's status as a badge. A finished job whose review found issues
/// reads "Issues found", not "Done".
pub fn status_badge(status: JobStatus, flagged: bool) -> impl IntoView {
    let (class, label) = if flagged {
        ("flagged", "Issues found")
    } else {
        (status.as_str(), status.label())
    };
    view! { <span class=format!("badge status status-{class}")>{label}</span> }
}

/// A short title for a request: "Embroidery · pet" or "Video · 5 s 1080p".
pub fn request_title(r: &JobRequest) -> String {
    match r {
        JobRequest::ImageEdit(e) => {
            let name = style(&e.style).map(|s| s.name).unwrap_or(e.style.as_str());
            format!("{name} · {}", e.target.kind.as_str())
        }
        JobRequest::Video(v) => format!("Video · {} s {}", v.duration_s, v.resolution.as_str()),
    }
}

fn thumbnail(r: &JobRequest) -> Option<String> {
    match r {
        JobRequest::ImageEdit(e) => Some(e.source.to_string()),
        JobRequest::Video(v) => v.source.map(|s| s.to_string()),
    }
}

#[component]
pub fn EditsPage() -> impl IntoView {
    let cursor = use_query_map()
        .get_untracked()
        .get("cursor")
        .filter(|c| !c.is_empty());
    let jobs = Resource::new_blocking(move || cursor.clone(), my_jobs);
    view! {
        <Title text="My edits" />
        <header class="page-head page-head-row">
            <div>
                <h1>"My edits"</h1>
                <p class="lede">"Everything you have ordered, newest first."</p>
            </div>
            <a class="btn btn-primary" href="/edits/new">"New edit"</a>
        </header>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match jobs.await {
                    Ok(page) if page.list_is_empty() => view! {
                        <section class="card empty-state">
                            <h2>"No edits yet"</h2>
                            <p class="muted">"Upload a photo, pick what to change and a handmade medium."</p>
                            <a class="btn btn-primary" href="/edits/new">"Make your first edit"</a>
                        </section>
                    }.into_any(),
                    Ok(page) => view! {
                        <JobGrid jobs=page.rows.clone() />
                        <Pager path="/edits".to_string() page=page noun="edits" />
                    }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn JobGrid(jobs: Vec<JobRow>) -> impl IntoView {
    let cards = jobs
        .into_iter()
        .map(|j| {
            let href = format!("/edits/{}", j.id);
            let title = request_title(&j.request);
            // The version the person has, once there is one; the photo
            // they uploaded before that.
            let image = j.delivered_url.clone().filter(|_| j.kind == tollgate::model::JobKind::ImageEdit).or_else(|| {
                thumbnail(&j.request).map(|id| format!("/v1/assets/{id}/content"))
            });
            let repairs = match j.repairs {
                0 => String::new(),
                1 => " · 1 repair".to_string(),
                n => format!(" · {n} repairs"),
            };
            view! {
                <a class="job-card" href=href data-testid="job-card">
                    <div class="job-thumb">
                        {match image {
                            Some(src) => view! { <img src=src alt="" loading="lazy" /> }.into_any(),
                            None => view! { <span class="job-thumb-empty" aria-hidden="true">"▶"</span> }.into_any(),
                        }}
                    </div>
                    <div class="job-body">
                        <div class="job-title">{title}</div>
                        <div class="job-meta">
                            {status_badge(j.status, j.flagged())}
                            <span class="muted small" data-testid="card-meta">{format!("{} credits · {}{repairs}", j.credits, j.created)}</span>
                        </div>
                    </div>
                </a>
            }
        })
        .collect::<Vec<_>>();
    view! { <div class="job-grid">{cards}</div> }
}

#[component]
pub fn EditDetailPage() -> impl IntoView {
    let id = use_params_map()
        .get_untracked()
        .get("id")
        .unwrap_or_default();
    let detail = Resource::new_blocking(move || id.clone(), load_job_detail);
    view! {
        <Title text="Edit" />
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Ok(d) => view! { <Detail detail=d /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Detail(detail: JobDetail) -> impl IntoView {
    let JobDetail {
        job,
        events,
        story,
        lineage,
        attempts,
        parked,
        kept,
    } = detail;
    let detailed = !events.is_empty();
    // Any two versions under one slider once there is more than one edit.
    let versions = lineage.as_ref().map(|l| slides(&job.request, l));
    // Queued and running jobs are followed live; a parked one waits for a
    // person, and its notice says so instead of a spinner.
    let live = matches!(job.status, JobStatus::Queued | JobStatus::Running)
        .then(|| (job.id.clone(), job.status.as_str().to_string()));
    let title = request_title(&job.request);
    let cancellable = !job.status.is_terminal();
    let cancel_action = format!("/edits/{}/cancel", job.id);
    let facts = order_facts(&job.request);
    view! {
        <header class="page-head page-head-row">
            <div>
                <p class="crumbs"><a href="/edits">"My edits"</a></p>
                <h1>{title}</h1>
                <div class="job-meta">
                    <span data-testid="job-status">{status_badge(job.status, job.flagged())}</span>
                    <span class="muted">{format!("Ordered {}", job.created)}</span>
                </div>
            </div>
            {cancellable.then(|| view! {
                <form method="post" action=cancel_action class="inline-form">
                    <button type="submit" class="btn btn-danger">"Cancel and refund"</button>
                </form>
            })}
        </header>
        {live.map(|(id, status)| view! { <LiveStatus job_id=id status=status /> })}
        <div class="grid-2">
            <ResultCard job=job.clone() versions=versions />
            <section class="card">
                <h2 class="card-title">"Order"</h2>
                <dl class="facts">
                    {facts.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd>{v}</dd> }).collect_view()}
                    <dt>"Price"</dt>
                    <dd data-testid="job-price">{format!("{} credits", job.credits)}</dd>
                    <dt>"Provider estimate"</dt>
                    <dd class="mono">{job.estimated_usd.clone()}</dd>
                </dl>
                {parked.map(|p| view! { <ParkedNotice parked=p /> })}
                <h2 class="card-title">"What happened"</h2>
                <Story rows=story />
                <p class="small muted" data-testid="kept">{kept}</p>
                <h2 class="card-title">"Provider attempts"</h2>
                <AttemptList attempts=attempts />
                {detailed.then(|| view! { <DetailedTimeline events=events /> })}
            </section>
        </div>
        {lineage
            .filter(|l| l.versions.len() > 1 || job.status == JobStatus::Succeeded)
            .map(|l| view! { <Versions lineage=l job_id=job.id.clone() /> })}
    }
}

/// What the review after the call found. A delivered result with issues
/// says what to do: a repair of it costs nothing the first time.
#[component]
fn ReviewNote(review: tollgate::model::Review, flagged: bool) -> impl IntoView {
    use tollgate::model::Verdict;
    let (class, head) = match review.verdict {
        Verdict::Passed => ("passed", "Review passed. "),
        Verdict::Issues => ("issues", "Our check found issues. "),
        Verdict::NotVerified => ("not_verified", "Not verified. "),
    };
    view! {
        <p class=format!("review review-{class}") data-testid="review">
            <strong>{head}</strong>
            {review.notes}
            {flagged.then(|| view! {
                <span class="review-next">" If it is not what you wanted, ask for a repair below: the first repair of a result with issues is free."</span>
            })}
        </p>
    }
}

/// How a job stands beside the one a reviewer's new attempt put in its
/// place: each links to the other. A replaced job's error is not a failure
/// the person must act on, so the link stands in its place.
#[component]
fn Replacement(
    replaces: Option<String>,
    replaced_by: Option<String>,
    error: Option<String>,
) -> impl IntoView {
    view! {
        {replaces.map(|old| view! {
            <div class="callout" data-testid="replaces" role="status">
                <p class="small">"A reviewer ordered this edit in place of one that could not finish; you paid once. "
                    <a href=format!("/edits/{old}")>"See the earlier attempt"</a>"."</p>
            </div>
        })}
        {match replaced_by {
            Some(new) => view! {
                <div class="callout" data-testid="replaced-by" role="status">
                    <strong>"A reviewer ordered a new attempt in this one's place."</strong>
                    <p class="small">"Your credits for this one came back, and the new attempt was charged the same, so you pay once. "
                        <a href=format!("/edits/{new}")>"Follow the new attempt"</a>"."</p>
                </div>
            }.into_any(),
            None => error.map(|e| view! { <div class="flash flash-error" role="alert"><p>{e}</p></div> }).into_any(),
        }}
    }
}

/// The result (or the uploaded photo while there is none), what its review
/// found, and what to do when the photo was not ready.
#[component]
fn ResultCard(job: JobRow, versions: Option<Slides>) -> impl IntoView {
    let again = format!("/edits/new?from={}", job.id);
    let candidate = job.candidate_url.clone();
    let result = job.output_url.clone();
    let is_video = matches!(job.request, JobRequest::Video(_));
    let review = job.review.clone();
    let flagged = job.flagged();
    let questions = job.questions.clone();
    let images = uploaded_images(&job.request);
    view! {
    <section class="card">
        <h2 class="card-title">{if result.is_some() { "Result" } else if is_video { "Clip" } else { "Your photo" }}</h2>
        {candidate.clone().map(|c| view! {
            <div class="callout" data-testid="kept-previous" role="status">
                <strong>"We kept the version you had."</strong>
                <p class="small">"This repair was compared with it and was no better, so your edit stays as it was. "
                    <a href=c>"See the repair's attempt"</a>"."</p>
            </div>
        })}
        {match (result.clone(), images.clone(), versions.clone()) {
            (Some(_), Some(_), Some((labels, urls, left, Some(right)))) if urls.len() > 2 => view! {
                <VersionCompare labels=labels urls=urls left=left right=right />
            }.into_any(),
            (Some(out), Some((before, _)), _) => view! { <BeforeAfter before=before after=out /> }.into_any(),
            (Some(out), None, _) => view! { <img class="result-clip" src=out alt="The generated clip" data-testid="result-image" /> }.into_any(),
            _ => ().into_any(),
        }}
        {review.map(|r| view! { <ReviewNote review=r flagged=flagged /> })}
        <Replacement replaces=job.replaces.clone() replaced_by=job.replaced_by.clone() error=job.error.clone() />
        {(!questions.is_empty()).then(|| view! {
            <div class="questions">
                <p><strong>"Before we try again:"</strong></p>
                <ul data-testid="questions">{questions.into_iter().map(|q| view! { <li>{q}</li> }).collect_view()}</ul>
                <p class="small muted">"Nothing was paid for this photo, and your credits are back."</p>
                <a class="btn btn-primary" href=again.clone()>"Change and order again"</a>
            </div>
        })}
        {match (result.is_some(), images) {
            (false, Some((src, mask))) => view! {
                <div class="photo-frame">
                    <img src=src alt="The photo you uploaded" />
                    {mask.map(|m| view! { <img class="mask-overlay" src=m alt="The area you painted" /> })}
                </div>
            }.into_any(),
            (false, None) => view! { <p class="muted">"A video is generated from the prompt."</p> }.into_any(),
            (true, _) => ().into_any(),
        }}
    </section>
    }
}

/// Labels and addresses of the versions under the slider, which starts on
/// the left, and which (if any) on the right.
type Slides = (Vec<String>, Vec<String>, usize, Option<usize>);

/// The photo and every version with an output, labelled, for the slider:
/// which one starts on the left (the version before the current one) and
/// which on the right (the current one).
fn slides(request: &JobRequest, l: &LineageView) -> Slides {
    let mut labels = Vec::new();
    let mut urls = Vec::new();
    if let JobRequest::ImageEdit(e) = request {
        labels.push("Your photo".to_string());
        urls.push(format!("/v1/assets/{}/content", e.source));
    }
    let mut current = None;
    let mut previous = None;
    for v in &l.versions {
        if let Some(u) = &v.output_url {
            if v.current {
                current = Some(urls.len());
            } else if current.is_none() {
                previous = Some(urls.len());
            }
            labels.push(if v.delivered {
                format!("{} (yours)", v.label)
            } else {
                v.label.clone()
            });
            urls.push(u.clone());
        }
    }
    (labels, urls, previous.unwrap_or(0), current)
}

/// What was ordered, as label and value.
fn order_facts(request: &JobRequest) -> Vec<(&'static str, String)> {
    match request {
        JobRequest::ImageEdit(e) => {
            let medium = style(&e.style)
                .map(|s| s.name)
                .unwrap_or(e.style.as_str())
                .to_string();
            let mut rows = vec![
                ("What to change", e.target.kind.label().to_string()),
                ("Medium", medium),
                ("Strength", e.strength.label().to_string()),
            ];
            if !e.target.description.is_empty() {
                rows.insert(1, ("Description", e.target.description.clone()));
            }
            rows
        }
        JobRequest::Video(v) => vec![
            ("Prompt", v.prompt.clone()),
            ("Model", v.model.clone()),
            (
                "Length",
                format!("{} s at {}", v.duration_s, v.resolution.as_str()),
            ),
        ],
    }
}

/// The uploaded photo and painted mask of an image edit.
fn uploaded_images(request: &JobRequest) -> Option<(String, Option<String>)> {
    match request {
        JobRequest::ImageEdit(e) => {
            let mask = e.target.mask.map(|m| format!("/v1/assets/{m}/content"));
            Some((format!("/v1/assets/{}/content", e.source), mask))
        }
        JobRequest::Video(_) => None,
    }
}

/// Every event as recorded, for reviewers and admins.
#[component]
fn DetailedTimeline(events: Vec<EventRow>) -> impl IntoView {
    view! {
        <details class="detailed" open>
            <summary class="card-title">"Detailed timeline"</summary>
            <Timeline events=events />
        </details>
    }
}

/// The owner's timeline: ordered, checked, sent, finished, refunded.
#[component]
fn Story(rows: Vec<StoryRow>) -> impl IntoView {
    view! {
        <ol class="story" data-testid="story">
            {rows.into_iter().map(|r| view! {
                <li class=format!("story-{}", r.tone)>
                    <span class="story-dot" aria-hidden="true"></span>
                    <span class="story-what">{r.what}</span>
                    <span class="muted small story-when">{r.when}</span>
                </li>
            }).collect_view()}
        </ol>
    }
}

/// The lineage: each version (the delivered one marked), each repair's
/// instruction and what the comparison found, and the repair form.
#[component]
fn Versions(lineage: LineageView, job_id: String) -> impl IntoView {
    let LineageView {
        versions,
        repairs_left,
        closed,
        repair_credits,
        balance,
        repair_key,
        delivered_id,
    } = lineage;
    let on_delivered = delivered_id == job_id;
    let cards = versions
        .into_iter()
        .map(|v| view! { <VersionCard v=v /> })
        .collect_view();
    let terms = RepairTerms {
        credits: repair_credits,
        balance,
        repairs_left,
        on_delivered,
    };
    view! {
        <section class="card lineage" data-testid="lineage">
            <h2 class="card-title">"Versions"</h2>
            <ol class="version-strip">{cards}</ol>
            <h2 class="card-title">"Ask for a repair"</h2>
            {match closed {
                Some(why) => view! { <p class="muted" data-testid="repair-closed">{why}</p> }.into_any(),
                None => view! { <RepairForm job_id=job_id repair_key=repair_key terms=terms /> }.into_any(),
            }}
        </section>
    }
}

/// One version of a lineage: its result, whether it is the person's, what
/// its comparison found, and "Make this mine" where it may be chosen.
#[component]
fn VersionCard(v: VersionView) -> impl IntoView {
    let outcome = v.outcome.clone().map(|o| match o.as_str() {
        "improved" => ("Better: delivered", "ok"),
        "unchanged" => ("No better: yours kept", "warn"),
        "worse" => ("Worse: yours kept", "warn"),
        _ => ("Compared", "plain"),
    });
    view! {
        <li class="version" class:version-delivered=v.delivered class:version-current=v.current data-testid="version">
            <a href=format!("/edits/{}", v.id) class="version-link">
                <div class="version-thumb">
                    {match v.output_url.clone() {
                        Some(u) => view! { <img src=u alt=format!("{}", v.label) loading="lazy" /> }.into_any(),
                        None => view! { <span class="muted small">{v.status.label()}</span> }.into_any(),
                    }}
                </div>
                <div class="version-body">
                    <strong>{v.label.clone()}</strong>
                    {v.delivered.then(|| view! { <span class="badge status-succeeded" data-testid="delivered-badge">"Yours"</span> })}
                    {outcome.map(|(text, tone)| view! { <span class=format!("badge outcome-{tone}") data-testid="outcome">{text}</span> })}
                    {v.instruction.clone().map(|i| view! { <p class="small version-instruction">"“"{i}"”"</p> })}
                    {(v.status != tollgate::model::JobStatus::Succeeded).then(|| view! { <p class="small muted">{v.status.label()}</p> })}
                </div>
            </a>
            {v.choosable.then(|| view! {
                <form method="post" action=format!("/edits/{}/choose", v.id) class="version-choose">
                    <button type="submit" class="btn btn-ghost btn-small" data-testid="choose-version">"Make this mine"</button>
                </form>
            })}
        </li>
    }
}

/// What a repair costs and leaves, as the form says it.
#[derive(Clone, Copy)]
struct RepairTerms {
    credits: i64,
    balance: i64,
    repairs_left: u32,
    /// The page is the version a repair would start from.
    on_delivered: bool,
}

/// The repair form: the instruction, and before the click what it costs
/// (free when our check found issues), what is left, and the refund.
#[component]
fn RepairForm(job_id: String, repair_key: String, terms: RepairTerms) -> impl IntoView {
    let RepairTerms {
        credits,
        balance,
        repairs_left,
        on_delivered,
    } = terms;
    let start = if on_delivered {
        "The repair starts from this version. "
    } else {
        "The repair starts from the version you have now. "
    };
    let (price, why) = if credits == 0 {
        (
            "Free".to_string(),
            " · our check found issues with this version, so this repair is on us".to_string(),
        )
    } else {
        (
            format!("{credits} credits"),
            format!(" · you have {balance}"),
        )
    };
    view! {
        <form method="post" action=format!("/edits/{job_id}/repairs") class="repair-form" data-testid="repair-form">
            <input type="hidden" name="key" value=repair_key />
            <div class="field">
                <label for="instruction">"What should change?"</label>
                <textarea id="instruction" name="instruction" rows="3" required maxlength="500"
                    placeholder="For example: make the stitches bolder, or keep the leash photographic"></textarea>
                <p class="hint small muted">
                    {start}
                    "The settings stay the same. We compare the result with your version and keep the better one."
                </p>
            </div>
            <p class="repair-terms">
                <span data-testid="repair-price">{price}</span>
                <span class="muted small">{why}{format!(" · {repairs_left} of 2 repairs left · refunded if it fails")}</span>
            </p>
            <button type="submit" class="btn btn-primary" data-testid="repair-submit">"Ask for a repair"</button>
        </form>
    }
}

#[component]
fn AttemptList(attempts: Vec<AttemptRow>) -> impl IntoView {
    if attempts.is_empty() {
        return view! { <p class="muted small">"No provider has been called."</p> }.into_any();
    }
    view! {
        <ul class="attempts" data-testid="attempts">
            {attempts.into_iter().map(|a| {
                let tone = match a.state { AttemptState::Succeeded => "succeeded", AttemptState::Failed => "failed", AttemptState::Submitting | AttemptState::Submitted => "running" };
                view! {
                <li>
                    <span class="small">{format!("Try {} · {}", a.attempt_no, a.model)}</span>
                    <span class=format!("badge status-{tone}")>{attempt_outcome(a.state, a.error_class)}</span>
                    <span class="muted small">{a.duration_ms.map(seconds).unwrap_or_default()}</span>
                    <span class="small">{cost_words(a.cost_usd.as_deref(), a.cost_source.as_deref())}</span>
                    {a.provider_job_id.map(|id| view! { <span class="mono small muted" title="The provider's id for this call">{id}</span> })}
                </li>
                }
            }).collect_view()}
        </ul>
    }
    .into_any()
}

/// An attempt's state and, when it failed, why: "failed: timed out".
fn attempt_outcome(state: AttemptState, error_class: Option<ErrorClass>) -> String {
    match (state, error_class) {
        (AttemptState::Succeeded, _) => "done".into(),
        (AttemptState::Failed, None | Some(ErrorClass::Failed)) => "failed".into(),
        (AttemptState::Failed, Some(why)) => format!("failed: {}", why.words()),
        (AttemptState::Submitted, _) => "in progress".into(),
        (AttemptState::Submitting, _) => "sending".into(),
    }
}

fn seconds(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// What a call cost, and how that is known; unknown is never $0.
fn cost_words(usd: Option<&str>, source: Option<&str>) -> String {
    match (usd, source) {
        (Some(c), Some("quoted")) => format!("${c}, as billed"),
        (Some(c), Some("derived")) => format!("${c}, by the price list"),
        (Some(_), Some("local")) => "no charge (runs here)".into(),
        (Some(c), _) => format!("${c}"),
        (None, _) => "cost unknown".into(),
    }
}

/// How parked work stands, as one status: why a person looks and what
/// happens next (its owner), and the record's facts (the studio's staff).
#[component]
fn ParkedNotice(parked: ParkedRow) -> impl IntoView {
    let class = if parked.waiting {
        "callout warning"
    } else {
        "callout"
    };
    view! {
        <div class=class data-testid="parked" role="status">
            <strong>{parked.headline}</strong>
            <p class="small" data-testid="parked-words">{parked.explain}</p>
            {parked.new_job.map(|j| view! {
                <p class="small"><a href=format!("/edits/{j}") data-testid="new-attempt-link">"See the new attempt →"</a></p>
            })}
            {parked.staff.map(|f| view! {
                <p class="small muted" data-testid="parked-facts">
                    {format!("{}: {} ", f.stage, f.evidence)}
                    {f.hold_usd.map(|h| format!("Budget held: ${h}. "))}
                    {f.provider_job_id.map(|id| format!("Provider id: {id}. "))}
                    {format!("Parked {}. ", f.since)}
                    <a href=f.record>"Open the record"</a>
                </p>
            })}
        </div>
    }
}
