//! The store conformance suite: every behaviour, on SQLite and PostgreSQL.
//! Races are real: many tasks, one barrier, then count rows.

use chrono::Utc;
use std::sync::Arc;
use tokio::sync::Barrier;
use tollgate::model::{Credits, LedgerEntryId, LedgerKind, Role, UserId};
use tollgate::store::{NewLedgerEntry, StoreError};
use tollgate::Error;
use tollgate_testkit::both_backends;
use tollgate_testkit::TestDb;

const PASSWORD: &str = "correct horse battery";

both_backends!(
    emails_are_unique_case_insensitively,
    racing_setups_make_one_admin,
    setup_closes_once_an_admin_exists,
    roles_and_disabled_round_trip,
    tokens_are_hashed_at_rest_and_revocable,
    ledger_rejects_update_and_delete_even_in_raw_sql,
    ledger_trigger_blocks_overdraw_in_raw_sql,
    duplicate_reference_is_one_entry,
    racing_debits_never_overdraw,
    grants_with_a_key_happen_once,
    login_says_the_same_for_unknown_email_and_wrong_password,
    logins_are_rate_limited_per_account_and_address,
    password_change_requires_the_current_one,
    assets_are_found_where_they_are_stored_in_one_lookup,
);

async fn user(db: &TestDb, email: &str, role: Role) -> tollgate::store::User {
    db.tollgate
        .add_user(email, role, PASSWORD)
        .await
        .expect("adding a user")
}

fn entry(user: UserId, amount: i64, kind: LedgerKind, reference: String) -> NewLedgerEntry {
    NewLedgerEntry {
        id: LedgerEntryId::new(),
        user_id: user,
        amount: Credits(amount),
        kind,
        reference,
        actor_id: None,
        reason: None,
        created_at: Utc::now(),
    }
}

/// Runs one SQL statement bypassing the application, on either backend.
async fn raw(
    db: &TestDb,
    sql_sqlite: &str,
    sql_pg: &str,
    id: uuid::Uuid,
) -> Result<u64, sqlx::Error> {
    if let Some(pool) = db.store().sqlite_pool() {
        sqlx::query(sql_sqlite)
            .bind(id)
            .execute(&pool)
            .await
            .map(|r| r.rows_affected())
    } else {
        let pool = db
            .store()
            .postgres_pool()
            .expect("one backend or the other");
        sqlx::query(sql_pg)
            .bind(id)
            .execute(&pool)
            .await
            .map(|r| r.rows_affected())
    }
}

async fn emails_are_unique_case_insensitively(db: TestDb) {
    let a = user(&db, "Ana@Example.com", Role::User).await;
    assert_eq!(a.email.as_str(), "ana@example.com");
    let again = db
        .tollgate
        .add_user("ANA@example.COM", Role::User, PASSWORD)
        .await;
    assert!(
        matches!(
            again,
            Err(Error::Conflict {
                code: "EMAIL_TAKEN",
                ..
            })
        ),
        "{again:?}"
    );
    let found = db
        .store()
        .user_by_email("ana@EXAMPLE.com")
        .await
        .unwrap()
        .expect("found");
    assert_eq!(found.id, a.id);
    assert_eq!(db.store().list_users().await.unwrap().len(), 1);
}

async fn racing_setups_make_one_admin(db: TestDb) {
    let n = 8;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let t = db.tollgate.clone();
        let b = barrier.clone();
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            let token = t.setup_token().to_string();
            t.complete_setup(&token, &format!("admin{i}@example.com"), PASSWORD, PASSWORD)
                .await
        }));
    }
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => wins += 1,
            Err(Error::Conflict {
                code: "SETUP_COMPLETE",
                ..
            }) => {}
            Err(other) => panic!("unexpected setup error: {other:?}"),
        }
    }
    assert_eq!(wins, 1);
    let users = db.store().list_users().await.unwrap();
    assert_eq!(users.len(), 1, "losers left users behind: {users:?}");
    assert_eq!(users[0].role, Role::Admin);
    assert!(!db.tollgate.setup_needed().await.unwrap());
}

async fn setup_closes_once_an_admin_exists(db: TestDb) {
    assert!(db.tollgate.setup_needed().await.unwrap());
    // Issue 29, 5: without the token the node printed, nobody becomes admin.
    for wrong in ["", "guess", &format!("{}x", db.tollgate.setup_token())] {
        let r = db
            .tollgate
            .complete_setup(wrong, "stranger@example.com", PASSWORD, PASSWORD)
            .await;
        assert!(
            matches!(&r, Err(Error::Invalid { fields, .. }) if fields.contains_key("token")),
            "{r:?}"
        );
    }
    assert!(db.store().list_users().await.unwrap().is_empty());
    assert!(db.tollgate.setup_needed().await.unwrap());
    let token = db.tollgate.setup_token().to_string();
    user(&db, "boss@example.com", Role::Admin).await;
    assert!(!db.tollgate.setup_needed().await.unwrap());
    let r = db
        .tollgate
        .complete_setup(&token, "late@example.com", PASSWORD, PASSWORD)
        .await;
    assert!(
        matches!(
            r,
            Err(Error::Conflict {
                code: "SETUP_COMPLETE",
                ..
            })
        ),
        "{r:?}"
    );
    let bad = db
        .tollgate
        .complete_setup(&token, "x@example.com", "short", "short")
        .await;
    assert!(matches!(bad, Err(Error::Invalid { .. })));
}

async fn roles_and_disabled_round_trip(db: TestDb) {
    let admin = user(&db, "admin@example.com", Role::Admin).await;
    let u = user(&db, "u@example.com", Role::User).await;
    let u2 = db
        .tollgate
        .set_role(&admin, u.id, Role::Reviewer)
        .await
        .unwrap();
    assert_eq!(u2.role, Role::Reviewer);
    let u3 = db.tollgate.set_disabled(&admin, u.id, true).await.unwrap();
    assert!(u3.disabled);
    assert!(db
        .tollgate
        .set_disabled(&admin, admin.id, true)
        .await
        .is_err());
    assert!(db
        .tollgate
        .set_role(&admin, admin.id, Role::User)
        .await
        .is_err());
    assert_eq!(db.store().count_active_admins().await.unwrap(), 1);
    let missing = db
        .tollgate
        .set_role(&admin, UserId::new(), Role::User)
        .await;
    assert!(matches!(missing, Err(Error::NotFound(_))));
}

async fn tokens_are_hashed_at_rest_and_revocable(db: TestDb) {
    let admin = user(&db, "admin@example.com", Role::Admin).await;
    let u = user(&db, "u@example.com", Role::User).await;
    let (token, secret) = db.tollgate.create_api_token(&u, "ci").await.unwrap();
    assert!(secret.starts_with("tg_"));
    let hash = tollgate::usecases::auth::token_hash(&secret);
    let found = db
        .store()
        .user_by_token_hash(&hash, Utc::now())
        .await
        .unwrap()
        .expect("token works");
    assert_eq!(found.0.id, u.id);
    assert_eq!(found.1, token.id, "the token that was used is named");

    // Nothing stored anywhere in the tokens table contains the secret.
    let stored: Vec<(String, String, String)> = if let Some(pool) = db.store().sqlite_pool() {
        sqlx::query_as("SELECT name, token_hash, prefix FROM api_tokens")
            .fetch_all(&pool)
            .await
            .unwrap()
    } else {
        sqlx::query_as("SELECT name, token_hash, prefix FROM api_tokens")
            .fetch_all(&db.store().postgres_pool().unwrap())
            .await
            .unwrap()
    };
    assert_eq!(stored.len(), 1);
    for (name, h, prefix) in &stored {
        for col in [name, h, prefix] {
            assert!(!col.contains(&secret), "the secret is stored");
        }
        assert_eq!(h, &hash);
    }

    // Another user cannot revoke it; its owner can, once.
    let other = db.tollgate.revoke_api_token(&admin, token.id).await;
    assert!(matches!(other, Err(Error::NotFound(_))));
    db.tollgate.revoke_api_token(&u, token.id).await.unwrap();
    assert!(db.tollgate.revoke_api_token(&u, token.id).await.is_err());
    assert!(db
        .store()
        .user_by_token_hash(&hash, Utc::now())
        .await
        .unwrap()
        .is_none());

    // A disabled user's tokens stop working.
    let (_, secret2) = db.tollgate.create_api_token(&u, "second").await.unwrap();
    db.tollgate.set_disabled(&admin, u.id, true).await.unwrap();
    let hash2 = tollgate::usecases::auth::token_hash(&secret2);
    assert!(db
        .store()
        .user_by_token_hash(&hash2, Utc::now())
        .await
        .unwrap()
        .is_none());
}

async fn ledger_rejects_update_and_delete_even_in_raw_sql(db: TestDb) {
    let u = user(&db, "u@example.com", Role::User).await;
    db.tollgate
        .grant_credits(None, u.id, Credits(5), Some("welcome"), None)
        .await
        .unwrap();
    let e = db
        .store()
        .ledger_for_user(u.id, 10)
        .await
        .unwrap()
        .remove(0);
    let upd = raw(
        &db,
        "UPDATE ledger SET amount = 500 WHERE id = ?",
        "UPDATE ledger SET amount = 500 WHERE id = $1",
        e.id.0,
    )
    .await;
    assert!(upd.unwrap_err().to_string().contains("immutable_ledger"));
    let del = raw(
        &db,
        "DELETE FROM ledger WHERE id = ?",
        "DELETE FROM ledger WHERE id = $1",
        e.id.0,
    )
    .await;
    assert!(del.unwrap_err().to_string().contains("immutable_ledger"));
    if let Some(pool) = db.store().postgres_pool() {
        let t = sqlx::query("TRUNCATE ledger CASCADE").execute(&pool).await;
        assert!(t.unwrap_err().to_string().contains("immutable_ledger"));
    }
    assert_eq!(db.tollgate.user(u.id).await.unwrap().balance, Credits(5));
    assert_eq!(db.store().ledger_sum(u.id).await.unwrap(), Credits(5));
}

async fn ledger_trigger_blocks_overdraw_in_raw_sql(db: TestDb) {
    let u = user(&db, "u@example.com", Role::User).await;
    db.tollgate
        .grant_credits(None, u.id, Credits(3), None, None)
        .await
        .unwrap();
    let sqlite = "INSERT INTO ledger (id, user_id, amount, kind, reference, created_at) \
                  VALUES (randomblob(16), ?, -4, 'debit', 'debit:raw', '2026-01-01T00:00:00Z')";
    let pg = "INSERT INTO ledger (id, user_id, amount, kind, reference, created_at) \
              VALUES (gen_random_uuid(), $1, -4, 'debit', 'debit:raw', now())";
    let err = raw(&db, sqlite, pg, u.id.0).await.unwrap_err();
    assert!(err.to_string().contains("insufficient_credits"), "{err}");
    assert_eq!(db.tollgate.user(u.id).await.unwrap().balance, Credits(3));
    // Within the balance, the same raw insert applies and moves the balance.
    let ok_sqlite = sqlite.replace("-4", "-3");
    let ok_pg = pg.replace("-4", "-3");
    assert_eq!(raw(&db, &ok_sqlite, &ok_pg, u.id.0).await.unwrap(), 1);
    assert_eq!(db.tollgate.user(u.id).await.unwrap().balance, Credits(0));
    // A direct write of a negative balance is refused by the CHECK.
    let neg = raw(
        &db,
        "UPDATE users SET balance = -1 WHERE id = ?",
        "UPDATE users SET balance = -1 WHERE id = $1",
        u.id.0,
    )
    .await;
    assert!(neg.is_err());
}

async fn duplicate_reference_is_one_entry(db: TestDb) {
    let u = user(&db, "u@example.com", Role::User).await;
    let reference = format!("refund:job:{}", uuid::Uuid::new_v4());
    let first = db
        .store()
        .append_ledger(&entry(u.id, 2, LedgerKind::Refund, reference.clone()))
        .await
        .unwrap();
    assert!(first.is_some());
    for _ in 0..5 {
        let again = db
            .store()
            .append_ledger(&entry(u.id, 2, LedgerKind::Refund, reference.clone()))
            .await
            .unwrap();
        assert!(again.is_none());
    }
    assert_eq!(db.tollgate.user(u.id).await.unwrap().balance, Credits(2));
    assert_eq!(
        db.store().ledger_for_user(u.id, 100).await.unwrap().len(),
        1
    );
}

async fn racing_debits_never_overdraw(db: TestDb) {
    let u = user(&db, "u@example.com", Role::User).await;
    db.tollgate
        .grant_credits(None, u.id, Credits(10), None, None)
        .await
        .unwrap();
    let n = 50;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let store = db.store().clone();
        let b = barrier.clone();
        let e = entry(u.id, -1, LedgerKind::Debit, format!("debit:race:{i}"));
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            store.append_ledger(&e).await
        }));
    }
    let (mut applied, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(Some(_)) => applied += 1,
            Err(StoreError::InsufficientCredits) => refused += 1,
            other => panic!("unexpected: {other:?}"),
        }
    }
    assert_eq!((applied, refused), (10, 40));
    assert_eq!(db.tollgate.user(u.id).await.unwrap().balance, Credits(0));
    assert_eq!(db.store().ledger_sum(u.id).await.unwrap(), Credits(0));
}

async fn grants_with_a_key_happen_once(db: TestDb) {
    let admin = user(&db, "admin@example.com", Role::Admin).await;
    let u = user(&db, "u@example.com", Role::User).await;
    let n = 10;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let t = db.tollgate.clone();
        let b = barrier.clone();
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            t.grant_credits(Some(admin.id), u.id, Credits(7), None, Some("form-key-1"))
                .await
        }));
    }
    let mut new = 0;
    for t in tasks {
        if t.await.unwrap().unwrap().1 {
            new += 1;
        }
    }
    assert_eq!(new, 1);
    assert_eq!(db.tollgate.user(u.id).await.unwrap().balance, Credits(7));
    let other_amount = db
        .tollgate
        .grant_credits(Some(admin.id), u.id, Credits(8), None, Some("form-key-1"))
        .await;
    assert!(matches!(
        other_amount,
        Err(Error::Conflict {
            code: "IDEMPOTENCY_CONFLICT",
            ..
        })
    ));
    let zero = db
        .tollgate
        .grant_credits(Some(admin.id), u.id, Credits(0), None, None)
        .await;
    assert!(matches!(zero, Err(Error::Invalid { .. })));
}

async fn login_says_the_same_for_unknown_email_and_wrong_password(db: TestDb) {
    let admin = user(&db, "admin@example.com", Role::Admin).await;
    let u = user(&db, "u@example.com", Role::User).await;
    let ok = db
        .tollgate
        .login("U@example.com", PASSWORD, None)
        .await
        .unwrap();
    assert_eq!(ok.id, u.id);
    let wrong = db
        .tollgate
        .login("u@example.com", "not the password", None)
        .await
        .unwrap_err();
    let unknown = db
        .tollgate
        .login("nobody@example.com", "not the password", None)
        .await
        .unwrap_err();
    assert_eq!(wrong.to_string(), unknown.to_string());
    assert_eq!(wrong.code(), "INVALID_CREDENTIALS");
    assert_eq!(unknown.code(), "INVALID_CREDENTIALS");
    db.tollgate.set_disabled(&admin, u.id, true).await.unwrap();
    let disabled = db
        .tollgate
        .login("u@example.com", PASSWORD, None)
        .await
        .unwrap_err();
    assert_eq!(disabled.code(), "ACCOUNT_DISABLED");
    // A disabled user's wrong password says nothing about the account.
    let disabled_wrong = db
        .tollgate
        .login("u@example.com", "nope nope nope", None)
        .await
        .unwrap_err();
    assert_eq!(disabled_wrong.code(), "INVALID_CREDENTIALS");
}

async fn logins_are_rate_limited_per_account_and_address(db: TestDb) {
    user(&db, "u@example.com", Role::User).await;
    let addr = Some("10.9.8.7".parse().unwrap());
    let mut codes = Vec::new();
    for _ in 0..6 {
        codes.push(
            db.tollgate
                .login("u@example.com", "wrong password!", addr)
                .await
                .unwrap_err()
                .code(),
        );
    }
    assert_eq!(codes[..5], ["INVALID_CREDENTIALS"; 5]);
    assert_eq!(codes[5], "RATE_LIMITED");
    // Even the right password is refused from there while limited…
    let there = db.tollgate.login("u@example.com", PASSWORD, addr).await;
    assert_eq!(there.unwrap_err().code(), "RATE_LIMITED");
    // …but the person signs in from anywhere else (issue 29, 6): a guesser
    // slows down only themselves, never locks the account.
    db.tollgate
        .login("u@example.com", PASSWORD, Some("10.1.1.1".parse().unwrap()))
        .await
        .expect("not locked out by someone else's guesses");
    // Per address: many accounts from one address are limited too.
    let mut last = "";
    for i in 0..25 {
        last = db
            .tollgate
            .login(
                &format!("x{i}@example.com"),
                "wrong password!",
                Some("10.2.2.2".parse().unwrap()),
            )
            .await
            .unwrap_err()
            .code();
    }
    assert_eq!(last, "RATE_LIMITED");

    // Sign-ins racing from many places share a few argon2 slots (19 MiB
    // each): all are answered, never more run at once than the cap.
    let barrier = Arc::new(Barrier::new(24));
    let mut racing = Vec::new();
    for i in 0..24u8 {
        let (t, b) = (db.tollgate.clone(), barrier.clone());
        racing.push(tokio::spawn(async move {
            b.wait().await;
            let from = Some(std::net::IpAddr::from([10, 3, 0, i]));
            t.login("u@example.com", "wrong password!", from).await
        }));
    }
    for r in racing {
        assert_eq!(r.await.unwrap().unwrap_err().code(), "INVALID_CREDENTIALS");
    }
    let (cap, most) = tollgate::usecases::auth::argon2_at_once();
    assert!(
        (1..=cap).contains(&most),
        "{most} argon2 runs at once, cap {cap}"
    );
}

async fn password_change_requires_the_current_one(db: TestDb) {
    let u = user(&db, "u@example.com", Role::User).await;
    let bad = db
        .tollgate
        .change_password(
            &u,
            "wrong",
            "a new long password",
            "a new long password",
            false,
        )
        .await;
    assert!(matches!(bad, Err(Error::Invalid { .. })));
    let mismatch = db
        .tollgate
        .change_password(&u, PASSWORD, "a new long password", "another one!!", false)
        .await;
    assert!(matches!(mismatch, Err(Error::Invalid { .. })));
    db.tollgate
        .change_password(
            &u,
            PASSWORD,
            "a new long password",
            "a new long password",
            false,
        )
        .await
        .unwrap();
    assert!(db
        .tollgate
        .login("u@example.com", PASSWORD, None)
        .await
        .is_err());
    assert!(db
        .tollgate
        .login("u@example.com", "a new long password", None)
        .await
        .is_ok());
}

async fn assets_are_found_where_they_are_stored_in_one_lookup(db: TestDb) {
    let u = user(&db, "maker@example.com", Role::User).await;
    let mut uploaded = Vec::new();
    for (w, h) in [(64, 48), (48, 64)] {
        let bytes = tollgate_testkit::photo_of_a_dog(w, h);
        let a = db
            .tollgate
            .upload_asset(&u, Some("image/png"), bytes.into())
            .await
            .expect("uploading a photo");
        uploaded.push(a);
    }
    let unknown = tollgate::model::AssetId(uuid::Uuid::new_v4());
    let ids = [uploaded[0].id, unknown, uploaded[1].id];
    let mut found = db.store().asset_object_keys(&ids).await.unwrap();
    found.sort_by_key(|(id, _)| ids.iter().position(|i| i == id));
    let expected: Vec<_> = uploaded
        .iter()
        .map(|a| (a.id, a.object_key.clone()))
        .collect();
    assert_eq!(
        found, expected,
        "each known asset once, the unknown left out"
    );
    assert!(db.store().asset_object_keys(&[]).await.unwrap().is_empty());
}
