//! Admin money pages: `/admin` (today at a glance and a 30-day chart drawn
//! as SVG on the server), `/admin/spend` (a range in the URL, spend by day,
//! model and error class, the attempts behind it, CSV) and `/admin/budget`
//! (caps, halt and resume with who, when and why, and the holds standing).
//! Calls nobody could price are always said apart, never drawn as $0.

use super::{LoadError, Pager};
use crate::data::{
    load_budget, load_overview, load_spend, BudgetView, ChangeRow, ChartBar, DayRow, HoldRow,
    Overview, SpendAttemptRow, SpendFilters, SpendView, SpenderRow, Standing, TallyRow,
    CHART_HEIGHT,
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

fn day_state(d: &DayRow) -> impl IntoView {
    if d.halted {
        let who = d
            .halted_by
            .clone()
            .unwrap_or_else(|| "the command line".into());
        let title = format!(
            "Halted by {who}{}{}",
            d.halted_at
                .as_ref()
                .map(|t| format!(" at {t}"))
                .unwrap_or_default(),
            d.halted_reason
                .as_ref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
        view! { <span class="badge badge-halted" title=title>"Halted"</span> }.into_any()
    } else if d.warning {
        view! { <span class="badge badge-warning">{format!("{}% used", d.percent)}</span> }
            .into_any()
    } else {
        view! { <span class="badge badge-open">"Open"</span> }.into_any()
    }
}

/// Used and held as parts of the cap.
fn meter(d: &DayRow, label: String) -> impl IntoView {
    view! {
        <div class="meter" role="img" aria-label=label>
            <span class="meter-fill" class:meter-warn=d.warning class:meter-halted=d.halted style=format!("width: {}%", d.percent.min(100))></span>
        </div>
    }
}

// ---------------------------------------------------------------- /admin

#[component]
pub fn AdminOverviewPage() -> impl IntoView {
    let data = Resource::new_blocking(|| (), |_| load_overview());
    view! {
        <Title text="Spend today" />
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(o) => view! { <OverviewView o=o /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// Today's money at a glance: cap, used, held, remaining, the unpriced
/// calls and the uncertain exposure, and the last 30 days.
#[component]
fn OverviewView(o: Overview) -> impl IntoView {
    let d = o.today.clone();
    let day_href = format!("/admin/spend?from={0}&to={0}", d.day);
    let unpriced_href = format!("/admin/spend?from={0}&to={0}&unpriced=1", d.day);
    view! {
        <header class="page-head page-head-row">
            <div>
                <h1>"Spend today"</h1>
                <p class="lede">{format!("{} (UTC): what the day may spend, what it has spent, and what nobody could price.", d.day)}</p>
                <nav class="nav" aria-label="Money pages">
                    <a class="nav-link" href="/admin/spend">"Spend by range"</a>
                    <a class="nav-link" href="/admin/budget" data-testid="budget-link">"Caps, halts and holds"</a>
                </nav>
            </div>
            <TodayHaltForm d=d.clone() />
        </header>
        <TodayBanner d=d.clone() warning_percent=o.warning_percent />
        <TodayTiles d=d.clone() passed=o.passed.clone() forecast=o.forecast.clone() />
        <section class="money-grid money-grid-2">
            <a class="card money-tile tile-link" href=unpriced_href data-testid="unpriced-today">
                <div class="stat-label">"Unpriced calls today"</div>
                <div class="money-value" class:unpriced-value=d.unpriced.gt(&0)>{d.unpriced}</div>
                <div class="small muted">
                    {format!("of {} calls; spend today is {}", d.attempts, d.spend)}
                </div>
            </a>
            <div class="card money-tile" data-testid="exposure">
                <div class="stat-label">"Uncertain exposure"</div>
                <div class="money-value">{format!("{} + {}", o.parked_hold, o.submitting_hold)}</div>
                <div class="small muted">
                    {format!("{} held by parked jobs, {} in calls still submitting: may have been paid, nobody knows yet", o.parked_holds, o.submitting)}
                </div>
            </div>
        </section>
        <section class="card">
            <div class="page-head-row">
                <h2 class="card-title">"The last 30 days"</h2>
                <a href=format!("/admin/spend?from={}&to={}", o.from, o.to) data-testid="month-total">{o.month.clone()}</a>
            </div>
            <SpendChart bars=o.bars.clone() max=o.chart_max.clone() />
            <p class="legend small muted">
                <span class="legend-bar"></span>" priced spend (scale to " {o.chart_max.clone()} ")   "
                <span class="legend-unpriced"></span>" calls nobody could price, counted apart and never drawn as $0"
            </p>
            <p class="small"><a href=day_href>"Today's attempts →"</a></p>
        </section>
    }
}

/// Today's cap, used, held and remaining, with the shares of the cap it
/// passed and when the cap would be reached at today's rate.
#[component]
fn TodayTiles(d: DayRow, passed: Vec<String>, forecast: String) -> impl IntoView {
    let meter_label = format!("{}% of today's cap used or held", d.percent);
    view! {
        <section class="money-grid" data-testid="today">
            <div class="card money-tile">
                <div class="stat-label">"Cap"</div>
                <div class="money-value">{d.cap.clone()}</div>
                {meter(&d, meter_label)}
                <div class="small muted">{format!("{}% used or held", d.percent)}</div>
                {(!passed.is_empty()).then(|| view! {
                    <div class="small" data-testid="thresholds">
                        "Passed " {passed.join(" · ")}
                    </div>
                })}
            </div>
            <div class="card money-tile">
                <div class="stat-label">"Used"</div>
                <div class="money-value" data-testid="used">{d.used.clone()}</div>
                <div class="small muted">"priced costs, plus the estimate for each unpriced call"</div>
            </div>
            <div class="card money-tile">
                <div class="stat-label">"Held"</div>
                <div class="money-value">{d.reserved.clone()}</div>
                <div class="small muted">"reserved by calls not yet settled"</div>
            </div>
            <div class="card money-tile">
                <div class="stat-label">"Remaining"</div>
                <div class="money-value">{d.remaining.clone()}</div>
                <div class="small muted">{day_state(&d)}</div>
                <div class="small" data-testid="forecast">{forecast}</div>
            </div>
        </section>
    }
}

/// Today halted, or past the warning share of its cap, said first.
#[component]
fn TodayBanner(d: DayRow, warning_percent: u32) -> impl IntoView {
    if d.halted {
        Some(view! {
            <div class="callout danger" role="status" data-testid="halted">
                <strong>"Spending is halted for today."</strong>
                <p>
                    {d.halted_reason.clone().unwrap_or_default()}
                    {d.halted_by.clone().map(|b| format!(" — {b}"))}
                    {d.halted_at.clone().map(|t| format!(", {t}"))}
                </p>
                <p>"No paid call is sent until it is resumed; jobs that need one fail and are refunded."</p>
            </div>
        }.into_any())
    } else if d.warning {
        Some(view! {
            <div class="callout warning" role="status" data-testid="warning">
                <strong>{format!("Today has used {}% of its cap.", d.percent)}</strong>
                <p>{format!("The warning shows from {}%. At the cap, paid calls stop and their jobs are refunded.", warning_percent)}</p>
            </div>
        }.into_any())
    } else {
        None
    }
}

/// Halt today (with a reason) or resume it, from the overview.
#[component]
fn TodayHaltForm(d: DayRow) -> impl IntoView {
    if d.halted {
        view! {
            <form method="post" action="/admin/budget/resume" class="inline-form">
                <input type="hidden" name="day" value=d.day.clone() />
                <input type="hidden" name="back" value="/admin" />
                <button type="submit" class="btn btn-primary">"Resume today"</button>
            </form>
        }
        .into_any()
    } else {
        view! {
            <form method="post" action="/admin/budget/halt" class="inline-form halt-form">
                <input type="hidden" name="day" value=d.day.clone() />
                <input type="hidden" name="back" value="/admin" />
                <label class="visually-hidden" for="halt-reason-today">"Why halt today"</label>
                <input id="halt-reason-today" name="reason" type="text" required maxlength="500" placeholder="Why halt today?" />
                <button type="submit" class="btn btn-danger">"Halt today"</button>
            </form>
        }.into_any()
    }
}

/// Thirty bars, priced spend only; each day's unpriced calls are marked on
/// their own row below the axis with their count.
#[component]
fn SpendChart(bars: Vec<ChartBar>, max: String) -> impl IntoView {
    const STEP: u32 = 24;
    const TOP: u32 = 8;
    let width = STEP * bars.len() as u32;
    let axis = TOP + CHART_HEIGHT;
    let marks_y = axis + 22;
    let labels_y = axis + 52;
    let n = bars.len();
    let cols = bars
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let x = i as u32 * STEP;
            let href = format!("/admin/spend?from={0}&to={0}", b.day);
            let tip = format!("{}: {}", b.day, b.spend);
            let show_label = i == 0 || i + 1 == n || i % 5 == 0;
            let bar_class = if b.halted { "bar bar-halted" } else { "bar" };
            view! {
                <a href=href>
                    <title>{tip}</title>
                    <rect class="bar-hit" x=x y=TOP width=STEP height=CHART_HEIGHT + 34></rect>
                    <rect class=bar_class x=x + 4 y=axis - b.height.max(u32::from(b.height > 0)) width=STEP - 8 height=b.height.max(u32::from(b.height > 0))></rect>
                    {(b.unpriced > 0).then(|| view! {
                        <g class="unpriced-mark" data-testid="unpriced-mark">
                            <rect x=x + 3 y=marks_y - 9 width=STEP - 6 height=18 rx=4></rect>
                            <text x=x + STEP / 2 y=marks_y + 4 text-anchor="middle">{b.unpriced}</text>
                        </g>
                    })}
                    {show_label.then(|| {
                        // The end labels stay inside the chart.
                        let (lx, anchor) = if i == 0 {
                            (x, "start")
                        } else if i + 1 == n {
                            (x + STEP, "end")
                        } else {
                            (x + STEP / 2, "middle")
                        };
                        view! { <text class="axis-label" x=lx y=labels_y text-anchor=anchor>{b.label.clone()}</text> }
                    })}
                </a>
            }
        })
        .collect_view();
    view! {
        <div class="chart-wrap">
            <svg class="spend-chart" viewBox=format!("0 0 {width} {}", labels_y + 8) role="img"
                aria-label=format!("Priced spend per day for 30 days, tallest {max}; unpriced calls marked apart") data-testid="chart">
                <line class="axis" x1="0" x2=width y1=axis y2=axis></line>
                <text class="axis-label" x="2" y=TOP + 10>{max.clone()}</text>
                {cols}
            </svg>
        </div>
    }
}

// ---------------------------------------------------------- /admin/spend

fn filters_from_url() -> SpendFilters {
    let q = use_query_map().get_untracked();
    let get = |k: &str| q.get(k).filter(|v| !v.is_empty());
    SpendFilters {
        from: get("from"),
        to: get("to"),
        unpriced: get("unpriced").is_some_and(|v| v == "1" || v == "on" || v == "true"),
        model: get("model"),
        class: get("class"),
        state: get("state"),
        cursor: get("cursor"),
    }
}

#[component]
pub fn SpendPage() -> impl IntoView {
    let filters = filters_from_url();
    let f = filters.clone();
    let data = Resource::new_blocking(move || f.clone(), load_spend);
    view! {
        <Title text="Spend" />
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let filters = filters.clone();
                Suspend::new(async move {
                    match data.await {
                        Ok(v) => view! { <SpendViewPage v=v filters=filters /> }.into_any(),
                        Err(e) => view! {
                            <header class="page-head"><h1>"Spend"</h1></header>
                            <LoadError error=e />
                            <p><a href="/admin/spend">"Show the last 30 days"</a></p>
                        }.into_any(),
                    }
                })
            }}
        </Suspense>
    }
}

#[component]
fn SpendViewPage(v: SpendView, filters: SpendFilters) -> impl IntoView {
    let base = SpendFilters {
        from: Some(v.from.clone()),
        to: Some(v.to.clone()),
        ..SpendFilters::default()
    };
    let path = {
        let mut f = filters.clone();
        f.from = Some(v.from.clone());
        f.to = Some(v.to.clone());
        format!("/admin/spend?{}", f.query())
    };
    let filtered = filters.unpriced
        || filters.model.is_some()
        || filters.class.is_some()
        || filters.state.is_some();
    let clear = format!("/admin/spend?{}#attempts", base.query());
    view! {
        <header class="page-head page-head-row">
            <div>
                <h1>"Spend"</h1>
                <p class="lede">{format!("{} to {} (UTC days, both included). Calls nobody could price are counted apart, never as $0.", v.from, v.to)}</p>
            </div>
            <a class="btn btn-ghost" href=v.csv_href.clone() download data-testid="csv">"Download CSV"</a>
        </header>
        <RangeForm from=v.from.clone() to=v.to.clone() />
        <RangeTotals v=v.clone() />
        <div class="grid-2">
            <section class="card">
                <h2 class="card-title">"By day"</h2>
                <DayTable days=v.days.clone() />
            </section>
            <div>
                <section class="card">
                    <h2 class="card-title">"By provider and model"</h2>
                    <TallyTable rows=v.models.clone() what="Provider · model" param="model" testid="by-model" base=base.clone() />
                </section>
                <section class="card">
                    <h2 class="card-title">"By error class"</h2>
                    <TallyTable rows=v.classes.clone() what="Error class" param="class" testid="by-class" base=base.clone() />
                </section>
            </div>
        </div>
        <div class="grid-2">
            <section class="card">
                <h2 class="card-title">"By person"</h2>
                <TallyTable rows=v.people.clone() what="Person" param="user" testid="by-person" base=base.clone() />
            </section>
            <section class="card">
                <h2 class="card-title">"By API token"</h2>
                <TallyTable rows=v.tokens.clone() what="Token · owner" param="user" testid="by-token" base=base.clone() />
            </section>
        </div>
        <section class="card" id="attempts">
            <div class="page-head-row">
                <h2 class="card-title">"Attempts"</h2>
                {filtered.then(|| view! { <a href=clear.clone() class="small">"Clear filters"</a> })}
            </div>
            <AttemptFilters v=v.clone() filters=filters.clone() />
            {if v.attempts.list_is_empty() {
                view! { <p class="empty">"No attempts match."</p> }.into_any()
            } else {
                view! { <AttemptTable rows=v.attempts.rows.clone() /> }.into_any()
            }}
            <Pager path=path page=v.attempts.clone() noun="attempts" older="Next →" newer="← Previous" anchor="#attempts" />
        </section>
    }
}

/// The range's spend and its calls (the unpriced counted apart), and days.
#[component]
fn RangeTotals(v: SpendView) -> impl IntoView {
    view! {
        <section class="money-grid money-grid-2">
            <div class="card money-tile" data-testid="range-total">
                <div class="stat-label">"Spend in range"</div>
                <div class="money-value">{v.total.clone()}</div>
                <div class="small muted">{format!("{} calls, {} of them unpriced", v.total_attempts, v.total_unpriced)}</div>
            </div>
            <div class="card money-tile">
                <div class="stat-label">"Days"</div>
                <div class="money-value">{v.days.len()}</div>
                <div class="small muted">"newest first below"</div>
            </div>
        </section>
    }
}

/// The range chooser, with quick ranges ending on the chosen last day.
#[component]
fn RangeForm(from: String, to: String) -> impl IntoView {
    let last = chrono::NaiveDate::parse_from_str(&to, "%Y-%m-%d").unwrap_or_default();
    let first = chrono::NaiveDate::parse_from_str(&from, "%Y-%m-%d").unwrap_or_default();
    let shown = (last - first).num_days() + 1;
    // The quick range the page shows is marked as the current one.
    let quick = [
        ("1 day", 1),
        ("7 days", 7),
        ("30 days", 30),
        ("90 days", 90),
    ]
    .into_iter()
    .map(|(label, days)| {
        let href = format!(
            "/admin/spend?from={}&to={}",
            last - chrono::Duration::days(days - 1),
            last
        );
        let here = (days == shown).then_some("page");
        view! { <a class="nav-link" href=href aria-current=here>{label}</a> }
    })
    .collect_view();
    view! {
        <section class="card">
            <form method="get" action="/admin/spend" class="form form-inline range-form">
                <div class="field">
                    <label for="range-from">"From"</label>
                    <input id="range-from" name="from" type="date" value=from required />
                </div>
                <div class="field">
                    <label for="range-to">"To"</label>
                    <input id="range-to" name="to" type="date" value=to required />
                </div>
                <button type="submit" class="btn btn-primary">"Show"</button>
                <nav class="nav" aria-label="Quick ranges">{quick}</nav>
            </form>
        </section>
    }
}

/// The range's days with calls (or halted), newest first; the quiet ones
/// are counted, not listed, so a month reads at a glance on a phone.
#[component]
fn DayTable(days: Vec<DayRow>) -> impl IntoView {
    let (busy, quiet): (Vec<_>, Vec<_>) =
        days.into_iter().partition(|d| d.attempts > 0 || d.halted);
    let quiet = match quiet.len() {
        0 => None,
        n if busy.is_empty() => Some(format!("No calls on any of the {n} days.")),
        1 => Some("1 day without calls is not listed.".to_string()),
        n => Some(format!("{n} days without calls are not listed.")),
    };
    let listed = !busy.is_empty();
    let rows = busy
        .iter()
        .map(|d| {
            let href = format!("/admin/spend?from={0}&to={0}", d.day);
            view! {
                <tr>
                    <td class="nowrap" data-label="Day"><a href=href>{d.day.clone()}</a></td>
                    <td data-label="Spend"><span class="amount">{d.spend.clone()}</span></td>
                    <td class="num" data-label="Calls">{d.attempts}</td>
                    <td class="num" data-label="Used / cap">{format!("{} / {}", d.used, d.cap)}</td>
                    <td data-label="State">{day_state(d)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-wrap table-scroll" hidden=!listed>
            <table class="table" data-testid="by-day">
                <thead><tr><th scope="col">"Day"</th><th scope="col">"Spend"</th><th scope="col" class="num">"Calls"</th><th scope="col" class="num">"Used / cap"</th><th scope="col">"State"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
        {quiet.map(|q| view! { <p class="small muted" data-testid="quiet-days">{q}</p> })}
    }
}

/// Spend by one key (a model, an error class, a person or a token), each
/// row filtering the attempts below by it, or opening the person's jobs.
#[component]
fn TallyTable(
    rows: Vec<TallyRow>,
    what: &'static str,
    param: &'static str,
    testid: &'static str,
    base: SpendFilters,
) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="empty">"No calls in this range."</p> }.into_any();
    }
    let body = rows
        .iter()
        .map(|r| {
            let mut f = base.clone();
            match param {
                "model" => f.model = Some(r.key.clone()),
                "class" => f.class = Some(if r.key.is_empty() { String::new() } else { r.key.clone() }),
                _ => {}
            }
            // A person's row opens their jobs; the others filter the attempts.
            let href = match param {
                "user" => format!("/admin/jobs?user={}", urlencoding::encode(&r.key)),
                _ => format!("/admin/spend?{}#attempts", f.query()),
            };
            let link = !(param == "class" && r.key.is_empty());
            view! {
                <tr>
                    <td data-label=what>
                        {if link { view! { <a href=href>{r.label.clone()}</a> }.into_any() } else { view! { <span>{r.label.clone()}</span> }.into_any() }}
                    </td>
                    <td class="num" data-label="Calls">{r.attempts}</td>
                    <td data-label="Spend"><span class="amount">{r.spend.clone()}</span></td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-wrap">
            <table class="table" data-testid=testid>
                <thead><tr><th scope="col">{what}</th><th scope="col" class="num">"Calls"</th><th scope="col">"Spend"</th></tr></thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
    .into_any()
}

/// The attempts' filters, each choice kept in the page's address.
#[component]
fn AttemptFilters(v: SpendView, filters: SpendFilters) -> impl IntoView {
    let model_options = v
        .models
        .iter()
        .map(|m| {
            let sel = filters.model.as_deref() == Some(m.key.as_str());
            view! { <option value=m.key.clone() selected=sel>{m.label.clone()}</option> }
        })
        .collect_view();
    let class_options = v
        .classes
        .iter()
        .filter(|c| !c.key.is_empty())
        .map(|c| {
            let sel = filters.class.as_deref() == Some(c.key.as_str());
            view! { <option value=c.key.clone() selected=sel>{c.label.clone()}</option> }
        })
        .collect_view();
    let state_options = ["submitting", "submitted", "succeeded", "failed"]
        .into_iter()
        .map(|s| {
            let sel = filters.state.as_deref() == Some(s);
            view! { <option value=s selected=sel>{s}</option> }
        })
        .collect_view();
    view! {
        <form method="get" action="/admin/spend#attempts" class="form form-inline attempt-filters">
            <input type="hidden" name="from" value=v.from.clone() />
            <input type="hidden" name="to" value=v.to.clone() />
            <label class="check">
                <input type="checkbox" name="unpriced" value="1" checked=filters.unpriced />
                " Unpriced only"
            </label>
            <div class="field">
                <label for="filter-model">"Model"</label>
                <select id="filter-model" name="model"><option value="">"Any"</option>{model_options}</select>
            </div>
            <div class="field">
                <label for="filter-class">"Error class"</label>
                <select id="filter-class" name="class"><option value="">"Any"</option>{class_options}</select>
            </div>
            <div class="field">
                <label for="filter-state">"State"</label>
                <select id="filter-state" name="state"><option value="">"Any"</option>{state_options}</select>
            </div>
            <button type="submit" class="btn btn-primary">"Filter"</button>
        </form>
    }
}

#[component]
fn AttemptTable(rows: Vec<SpendAttemptRow>) -> impl IntoView {
    let body = rows
        .into_iter()
        .map(|a| {
            let finished = !a.state.is_open();
            let cost = match (&a.cost, finished) {
                (Some(c), _) => view! {
                    <span class="mono">{c.clone()}</span>
                    <span class="small muted">{a.cost_source.clone().map(|s| format!(" {s}"))}</span>
                }.into_any(),
                (None, true) => view! { <span class="badge badge-unpriced">"unpriced"</span> }.into_any(),
                (None, false) => view! { <span class="muted">"not yet known"</span> }.into_any(),
            };
            let money = match (&a.hold, &a.settled) {
                (Some(h), Some(s)) => format!("held {h}, settled {s}"),
                (Some(h), None) => format!("holding {h}"),
                _ => String::new(),
            };
            view! {
                <tr data-testid="attempt-row">
                    <td class="nowrap small" data-label="Started">{a.started.clone()}</td>
                    <td data-label="User">{a.user.clone()}</td>
                    <td data-label="Model">
                        <div class="cell-title">{a.model.clone()}</div>
                        <div class="small muted">{format!("{} · attempt {}", a.provider, a.attempt_no)}</div>
                    </td>
                    <td data-label="State"><span class=format!("badge attempt-{}", a.state.as_str())>{a.state.as_str()}</span></td>
                    <td data-label="Error class">{a.error_class.map(|c| c.as_str()).unwrap_or_default()}</td>
                    <td data-label="Cost">{cost}</td>
                    <td class="small muted" data-label="Breaker">{money}</td>
                    <td class="actions"><a href=format!("/edits/{}", a.job_id) data-testid="timeline-link">"Timeline"</a></td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-wrap">
            <table class="table" data-testid="attempts">
                <thead>
                    <tr>
                        <th scope="col">"Started"</th>
                        <th scope="col">"User"</th>
                        <th scope="col">"Model"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"Error class"</th>
                        <th scope="col">"Cost"</th>
                        <th scope="col">"Breaker"</th>
                        <th scope="col"><span class="visually-hidden">"Job"</span></th>
                    </tr>
                </thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
}

// --------------------------------------------------------- /admin/budget

#[component]
pub fn BudgetPage() -> impl IntoView {
    let data = Resource::new_blocking(|| (), |_| load_budget());
    view! {
        <Title text="Budget" />
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(b) => view! { <BudgetViewPage b=b /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn BudgetViewPage(b: BudgetView) -> impl IntoView {
    let days = b
        .days
        .iter()
        .map(|d| view! { <BudgetDayRow d=d.clone() today=b.today.clone() /> })
        .collect_view();
    view! {
        <header class="page-head">
            <h1>"Budget"</h1>
            <p class="lede">
                {format!("Each UTC day has a cap ({} unless set here). Every paid call holds its estimate before it is sent; a call the day cannot hold is never sent, and its job fails and is refunded. A warning shows from {}% of the cap.", b.default_cap, b.warning_percent)}
            </p>
        </header>
        <section class="card">
            <h2 class="card-title">"Set a day's cap"</h2>
            <form method="post" action="/admin/budget/cap" class="form form-inline">
                <div class="field">
                    <label for="cap-day">"Day (UTC)"</label>
                    <input id="cap-day" name="day" type="date" value=b.today.clone() required />
                </div>
                <div class="field">
                    <label for="cap-usd">"Cap in dollars"</label>
                    <input id="cap-usd" name="cap_usd" type="text" inputmode="decimal" required pattern="[0-9]{1,6}(\\.[0-9]{1,6})?" placeholder="50.00" class="input-narrow" />
                </div>
                <button type="submit" class="btn btn-primary">"Set cap"</button>
            </form>
        </section>
        <section class="card">
            <h2 class="card-title">"Days"</h2>
            <div class="table-wrap">
                <table class="table" data-testid="budget-days">
                    <thead>
                        <tr>
                            <th scope="col">"Day"</th>
                            <th scope="col" class="num">"Cap"</th>
                            <th scope="col" class="num">"Used"</th>
                            <th scope="col" class="num">"Held"</th>
                            <th scope="col" class="num">"Remaining"</th>
                            <th scope="col">"Of cap"</th>
                            <th scope="col">"State"</th>
                            <th scope="col"><span class="visually-hidden">"Halt or resume"</span></th>
                        </tr>
                    </thead>
                    <tbody>{days}</tbody>
                </table>
            </div>
        </section>
        <SharesCard percent=b.share_percent share=b.share.clone() rows=b.spenders.clone() />
        <section class="card" data-testid="holds">
            <h2 class="card-title">"Reservations"</h2>
            <p class="small muted">
                {format!("Held now: {} across {} calls ({} left by dead workers). Settled on the days above: {}.", b.held_total, b.holds.len(), b.dead_holds, b.settled_total)}
            </p>
            {if b.holds.is_empty() {
                view! { <p class="empty">"No call holds budget right now: every reservation is settled."</p> }.into_any()
            } else {
                view! { <HoldTable rows=b.holds.clone() /> }.into_any()
            }}
        </section>
        <section class="card" data-testid="history">
            <h2 class="card-title">"History"</h2>
            {if b.history.is_empty() {
                view! { <p class="empty">"No cap set, halt or resume in these days."</p> }.into_any()
            } else {
                view! { <History rows=b.history.clone() /> }.into_any()
            }}
        </section>
    }
}

/// One day's cap, use and holds, and its halt (or resume) form.
#[component]
fn BudgetDayRow(d: DayRow, today: String) -> impl IntoView {
    let is_today = d.day == today;
    let label = format!("{}% of the cap used or held", d.percent);
    let action = if d.halted {
        view! {
            <form method="post" action="/admin/budget/resume" class="inline-form">
                <input type="hidden" name="day" value=d.day.clone() />
                <button type="submit" class="btn btn-primary btn-small">"Resume"</button>
            </form>
        }
        .into_any()
    } else {
        let id = format!("halt-{}", d.day);
        view! {
            <form method="post" action="/admin/budget/halt" class="inline-form halt-form">
                <input type="hidden" name="day" value=d.day.clone() />
                <label class="visually-hidden" for=id.clone()>{format!("Why halt {}", d.day)}</label>
                <input id=id name="reason" type="text" required maxlength="500" placeholder="Reason" />
                <button type="submit" class="btn btn-danger btn-small">"Halt"</button>
            </form>
        }.into_any()
    };
    let halted_note = d.halted.then(|| {
        view! {
            <div class="small muted halted-note">
                {format!(
                    "by {}{}{}",
                    d.halted_by.clone().unwrap_or_else(|| "the command line".into()),
                    d.halted_at.as_ref().map(|t| format!(", {t}")).unwrap_or_default(),
                    d.halted_reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default()
                )}
            </div>
        }
    });
    view! {
        <tr class:today-row=is_today data-day=d.day.clone()>
            <td class="nowrap" data-label="Day">
                <a href=format!("/admin/spend?from={0}&to={0}", d.day)>{d.day.clone()}</a>
                {is_today.then(|| view! { <span class="badge badge-today">"today"</span> })}
            </td>
            <td class="num" data-label="Cap">{d.cap.clone()}</td>
            <td class="num" data-label="Used">{d.used.clone()}</td>
            <td class="num" data-label="Held">{d.reserved.clone()}</td>
            <td class="num" data-label="Remaining">{d.remaining.clone()}</td>
            <td data-label="Of cap"><span class="meter-row">{meter(&d, label)}<span class="small muted">{format!("{}%", d.percent)}</span></span></td>
            <td data-label="State">{day_state(&d)}{halted_note}</td>
            <td class="actions">{action}</td>
        </tr>
    }
}

/// Who spent the most today against their share of the cap.
#[component]
fn SharesCard(percent: u32, share: String, rows: Vec<SpenderRow>) -> impl IntoView {
    view! {
        <section class="card" data-testid="shares">
            <h2 class="card-title">"People today"</h2>
            <p class="small muted">
                {format!("No one person's work may cost more than {percent}% of a day's cap: {share} today. Past it, their new paid requests wait for tomorrow (refunded work counts: the provider was paid); everyone else's go on.")}
            </p>
            {if rows.is_empty() {
                view! { <p class="empty">"Nobody's work has cost anything today."</p> }.into_any()
            } else {
                view! { <SpenderTable rows=rows /> }.into_any()
            }}
        </section>
    }
}

#[component]
fn SpenderTable(rows: Vec<SpenderRow>) -> impl IntoView {
    let body = rows
        .into_iter()
        .map(|r| {
            let used = r.percent >= 100;
            let near = !used && r.percent >= 80;
            let label = format!("{}% of their share", r.percent);
            let state = if used {
                view! { <span class="badge badge-halted">"share used"</span> }.into_any()
            } else if near {
                view! { <span class="badge badge-warning">"near their share"</span> }.into_any()
            } else {
                view! { <span class="muted small">{label.clone()}</span> }.into_any()
            };
            view! {
                <tr data-testid="spender">
                    <td data-label="Person">{r.email.clone()}</td>
                    <td class="num" data-label="Spent">{r.spent.clone()}</td>
                    <td class="num" data-label="Calls">{r.attempts}</td>
                    <td data-label="Of share">
                        <div class="meter" role="img" aria-label=label>
                            <span class="meter-fill" class:meter-warn=near class:meter-halted=used style=format!("width: {}%", r.percent.min(100))></span>
                        </div>
                    </td>
                    <td data-label="Standing">{state}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-wrap">
            <table class="table" data-testid="spenders">
                <thead>
                    <tr>
                        <th scope="col">"Person"</th>
                        <th scope="col" class="num">"Spent"</th>
                        <th scope="col" class="num">"Calls"</th>
                        <th scope="col">"Of their share"</th>
                        <th scope="col">"Standing"</th>
                    </tr>
                </thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
}

#[component]
fn HoldTable(rows: Vec<HoldRow>) -> impl IntoView {
    let body = rows
        .into_iter()
        .map(|h| {
            let class = match h.standing {
                Standing::Parked => "badge status status-parked",
                Standing::DeadWorker => "badge badge-halted",
                Standing::InFlight => "badge status status-running",
            };
            view! {
                <tr>
                    <td data-label="Job"><a href=format!("/edits/{}", h.job_id)>{h.model.clone()} {format!(" · attempt {}", h.attempt_no)}</a></td>
                    <td data-label="User">{h.user.clone()}</td>
                    <td class="num" data-label="Hold">{h.hold.clone()}</td>
                    <td class="nowrap" data-label="Day">{h.day.clone()}</td>
                    <td data-label="Standing"><span class=class>{h.standing.words()}</span></td>
                    <td class="small muted" data-label="Settlement">{h.standing.settlement()}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-wrap">
            <table class="table">
                <thead><tr><th scope="col">"Call"</th><th scope="col">"User"</th><th scope="col" class="num">"Hold"</th><th scope="col">"Day"</th><th scope="col">"Standing"</th><th scope="col">"Settlement"</th></tr></thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
}

#[component]
fn History(rows: Vec<ChangeRow>) -> impl IntoView {
    let items = rows
        .into_iter()
        .map(|c| {
            view! {
                <li>
                    <span class="timeline-kind">{c.what.clone()}</span>
                    <span>{format!("for {}", c.day)}</span>
                    <span class="muted small">{format!("by {}, {}", c.by, c.when)}</span>
                    {c.reason.map(|r| view! { <span class="reason">{format!("“{r}”")}</span> })}
                </li>
            }
        })
        .collect_view();
    view! { <ul class="timeline">{items}</ul> }
}
