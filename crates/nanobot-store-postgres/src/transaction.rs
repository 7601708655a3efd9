//! Statements and transactions: retried on serialization failures, with a test's fault points.

use super::*;

/// A statement of this crate. Only the validated schema name and this crate's own table
/// names are ever interpolated into SQL (see [`Schema`]); every value is bound.
pub(crate) fn query(
    sql: &str,
) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
}

/// [`query`] for one value per row.
pub(crate) fn query_scalar<O>(
    sql: &str,
) -> sqlx::query::QueryScalar<'static, sqlx::Postgres, O, sqlx::postgres::PgArguments>
where
    (O,): for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
{
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
}

/// Runs `body` in a transaction: committed when it succeeds; when it fails, rolled back and
/// the rollback awaited, so no lock it took outlives the call (a dropped transaction is
/// rolled back only when its connection is next used, and until then its row and advisory
/// locks stall everyone else).
pub(crate) async fn transaction<T, E>(
    pool: PgPool,
    fail: impl Fn(sqlx::Error) -> E,
    body: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<T, E>,
) -> Result<T, E> {
    let mut tx = pool.begin().await.map_err(&fail)?;
    match body(&mut tx).await {
        Ok(value) => {
            tx.commit().await.map_err(&fail)?;
            Ok(value)
        }
        Err(error) => {
            if let Err(e) = tx.rollback().await {
                tracing::debug!(error = %e, "a failed transaction could not be rolled back; its connection is dropped");
            }
            Err(error)
        }
    }
}

/// How many times a transaction that met a serialization failure (SQLSTATE 40001) or a
/// deadlock (40P01) is run in all before its error is returned (retryable).
pub const TRANSACTION_ATTEMPTS: u32 = 3;

/// Runs a port call's transaction (`run` makes one run of it: [`transaction`]) again when
/// the database refused it for a serialization failure or a deadlock: at most
/// [`TRANSACTION_ATTEMPTS`] runs in all, after a short random pause (5 to 25 ms times the
/// attempt), so two rivals do not collide again in step. Any other error returns at once.
pub(crate) async fn retrying<T, E, F>(mut run: impl FnMut() -> F) -> Result<T, E>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: std::error::Error + 'static,
{
    let mut attempt = 1u32;
    loop {
        match run().await {
            Err(error)
                if attempt < TRANSACTION_ATTEMPTS && error::is_refused_for_a_rival(&error) =>
            {
                let spread = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                let pause = 5 + u64::from(spread % 21);
                tokio::time::sleep(Duration::from_millis(pause * u64::from(attempt))).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Where a test may force an error at the start of a port call's transaction: asks the
/// [`ForcedErrors`] hook with the operation and the attempt (counted in `attempts`) and
/// raises the SQLSTATE it names, as the database would (feature `test-util`; a no-op
/// otherwise).
pub(crate) async fn forced_point(
    inner: &Inner,
    conn: &mut sqlx::PgConnection,
    operation: &str,
    attempts: &std::sync::atomic::AtomicU32,
) -> Result<(), sqlx::Error> {
    let attempt = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    #[cfg(not(feature = "test-util"))]
    let _ = (inner, conn, operation, attempt);
    #[cfg(feature = "test-util")]
    if let Some(code) = inner
        .forced
        .as_ref()
        .and_then(|hook| hook(operation, attempt))
    {
        let code: String = code.chars().filter(char::is_ascii_alphanumeric).collect();
        query(&format!(
            "DO $$ BEGIN RAISE EXCEPTION 'forced by a test' USING ERRCODE = '{code}'; END $$"
        ))
        .execute(conn)
        .await?;
    }
    Ok(())
}

/// Asked at the start of each run of a port call's transaction with its operation
/// (`"archive"`, `"memory commit"`, `"version commit"`, `"rewrite"`) and the attempt (from
/// 1): a SQLSTATE to raise there, as the database would (feature `test-util`).
#[cfg(feature = "test-util")]
pub type ForcedErrors = Arc<dyn Fn(&str, u32) -> Option<&'static str> + Send + Sync>;

/// Asked before each statement of a commit (`"memory commit"`, `"archive"`) with its
/// number: `true` kills the connection there, as a crash or a network fault would.
#[cfg(feature = "test-util")]
pub type FaultHook = Arc<dyn Fn(&str, usize) -> bool + Send + Sync>;

/// A point of `operation` where a test may kill the connection (feature `test-util`; a
/// no-op otherwise): the transaction's backend terminates itself, so the statement fails as
/// it would when the connection drops.
pub(crate) async fn fault_point(
    inner: &Inner,
    conn: &mut sqlx::PgConnection,
    operation: &str,
    step: usize,
) -> Result<(), sqlx::Error> {
    #[cfg(not(feature = "test-util"))]
    let _ = (inner, conn, operation, step);
    #[cfg(feature = "test-util")]
    if let Some(hook) = &inner.fault
        && hook(operation, step)
    {
        query("SELECT pg_terminate_backend(pg_backend_pid())")
            .execute(conn)
            .await?;
    }
    Ok(())
}
