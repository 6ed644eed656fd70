//! The tests' one HTTP client of `/v1`: a test database served on a free
//! port, people made with a token each, and requests that answer a status
//! with the body read as JSON (or text, or bytes). The API tests of every
//! file speak through it, so a change of how a test talks HTTP is made once.

use crate::TestDb;
use reqwest::StatusCode;
use serde_json::Value;
use tollgate::model::{Credits, Role};
use tollgate::store::User;

/// The password every person a test makes signs in with.
pub const PASSWORD: &str = "correct horse battery";

pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
    pub db: TestDb,
}

impl Api {
    /// Serves `db`'s `/v1` (with sessions) and keeps `db` alive with it.
    pub async fn serve(db: TestDb) -> Api {
        let base = db.serve_api().await;
        Api {
            base,
            http: reqwest::Client::new(),
            db,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A person with `credits` and an API token.
    pub async fn person(&self, email: &str, role: Role, credits: i64) -> (User, String) {
        let t = &self.db.tollgate;
        let u = t
            .add_user(email, role, PASSWORD)
            .await
            .expect("a new person");
        if credits > 0 {
            t.grant_credits(None, u.id, Credits(credits), None, None)
                .await
                .expect("a grant");
        }
        let token = t.create_api_token(&u, "test").await.expect("a token").1;
        (u, token)
    }

    /// `GET path` as `token`'s holder; the body as JSON (null when it is
    /// not JSON).
    pub async fn get(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let r = self.send(self.http.get(self.url(path)), Some(token)).await;
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// `GET path`, as `token`'s holder or nobody; the body as text (CSV,
    /// metrics, error pages).
    pub async fn get_text(&self, token: Option<&str>, path: &str) -> (StatusCode, String) {
        let r = self.send(self.http.get(self.url(path)), token).await;
        (r.status(), r.text().await.expect("a body"))
    }

    /// `GET path`, the body as bytes (outputs).
    pub async fn bytes(&self, token: &str, path: &str) -> (StatusCode, Vec<u8>) {
        let r = self.send(self.http.get(self.url(path)), Some(token)).await;
        (r.status(), r.bytes().await.expect("a body").to_vec())
    }

    /// `POST path` with a JSON body and, when given, an `Idempotency-Key`.
    pub async fn post(
        &self,
        token: &str,
        path: &str,
        key: Option<&str>,
        body: &Value,
    ) -> (StatusCode, Value) {
        let r = self.post_raw(token, path, key, body).await;
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// `POST path` answering the response itself (its headers matter).
    pub async fn post_raw(
        &self,
        token: &str,
        path: &str,
        key: Option<&str>,
        body: &Value,
    ) -> reqwest::Response {
        let mut r = self.http.post(self.url(path)).json(body);
        if let Some(k) = key {
            r = r.header("idempotency-key", k);
        }
        self.send(r, Some(token)).await
    }

    /// `POST /v1/jobs` under `key`: the response itself.
    pub async fn submit(&self, token: &str, key: &str, body: &Value) -> reqwest::Response {
        self.post_raw(token, "/v1/jobs", Some(key), body).await
    }

    /// `POST /v1/assets` with raw bytes of `content_type`.
    pub async fn upload(
        &self,
        token: &str,
        bytes: Vec<u8>,
        content_type: &str,
    ) -> reqwest::Response {
        let r = (self.http.post(self.url("/v1/assets")))
            .header("content-type", content_type)
            .body(bytes);
        self.send(r, Some(token)).await
    }

    /// A person's balance, checking rule 2's invariant at every look: the
    /// ledger sums to the balance.
    pub async fn balance(&self, u: &User) -> i64 {
        let t = &self.db.tollgate;
        let b = t.user(u.id).await.expect("the person").balance;
        assert_eq!(t.store().ledger_sum(u.id).await.expect("a ledger sum"), b);
        b.get()
    }

    async fn send(&self, r: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::Response {
        let r = match token {
            Some(t) => r.bearer_auth(t),
            None => r,
        };
        r.send().await.expect("the test server answers")
    }
}
