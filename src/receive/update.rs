//! The update phase (git's `execute_commands_non_atomic` / `execute_commands_atomic`): each
//! ref decided, then the queued updates committed as one ref transaction. A non-atomic push
//! writes its deletions first, in their own batch, then everything else; an atomic one is one
//! transaction that fails as a whole.

use std::io::Write;

use super::Fatal;
use super::command::{Cmd, refuse_pending};
use super::decide::{Decide, decide};
use crate::protocol::report::Reason;
use crate::protocol::sideband::Sideband;
use crate::refs::{
    self, Atomicity, RefResult, RefStore, RefUpdate, Refs, TransactionError, TransactionState,
};

pub(super) fn execute_non_atomic<W: Write, E: Write>(
    cmds: &mut [Cmd],
    ctx: &Decide<'_>,
    store: &dyn RefStore,
    committer: &gix_actor::Signature,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    // Deletions first, in their own batch, so a deleted `a/b` does not conflict with a new `a`.
    // The first batch is checked against the refs read for the decisions; a later one against
    // the refs as the earlier batch left them, read again only when there is a later one.
    let mut after_first: Option<Refs> = None;
    let mut deleted = false;
    for deletions in [true, false] {
        let (mut queued, mut updates) = (
            Vec::with_capacity(cmds.len()),
            Vec::with_capacity(cmds.len()),
        );
        for (i, cmd) in cmds.iter_mut().enumerate() {
            if !cmd.for_berth() || cmd.command.is_delete() != deletions {
                continue;
            }
            match decide(cmd, ctx, sb)? {
                Ok(Some(u)) => {
                    queued.push(i);
                    updates.push(u);
                }
                Ok(None) => {}
                Err(reason) => cmd.refuse(reason),
            }
        }
        if queued.is_empty() {
            continue;
        }
        if deleted {
            after_first = Some(store.snapshot().map_err(Fatal::Refs)?);
        }
        let current = after_first.as_ref().unwrap_or(&ctx.refs);
        let result = commit(
            store,
            &updates,
            false,
            current,
            ctx,
            committer,
            sb.stderr(),
            ctx.gate.map_or(0, |g| g.lost_ref_retries()),
        );
        give_back(cmds, &queued, updates, ctx);
        deleted |= deletions;
        match result {
            Ok(results) => {
                for (i, result) in queued.iter().zip(results) {
                    if let Err(e) = result {
                        sb.error(&e)?;
                        cmds[*i].refuse(match &*e {
                            refs::RefError::Gate { message } => Reason::Gate(message.clone()),
                            e => Reason::Transaction(e.reason()),
                        });
                    }
                }
            }
            Err(e) => {
                if let Some(state) = e.hook_aborted() {
                    return Err(Fatal::TransactionHook(state.name()));
                }
                sb.error(&e)?;
                // A replicated transaction's lock failure as a whole (reftable's one lock)
                // reads in the cluster's words on every ref, as a per-ref one does.
                let reason = match &e {
                    TransactionError::Prepare(refs::transaction::prepare::Error::Ref(
                        refs::RefError::Gate { message },
                    )) => Reason::Gate(message.clone()),
                    _ => Reason::FailedToUpdateRefs,
                };
                for c in cmds.iter_mut() {
                    c.refuse(reason.clone());
                }
            }
        }
    }
    Ok(())
}

pub(super) fn execute_atomic<W: Write, E: Write>(
    cmds: &mut [Cmd],
    ctx: &Decide<'_>,
    store: &dyn RefStore,
    committer: &gix_actor::Signature,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    let (mut queued, mut updates) = (Vec::new(), Vec::with_capacity(cmds.len()));
    let mut failure: Option<Reason> = None;
    for (i, cmd) in cmds.iter_mut().enumerate() {
        if !cmd.for_berth() {
            continue;
        }
        match decide(cmd, ctx, sb)? {
            Ok(Some(u)) => {
                queued.push(i);
                updates.push(u);
            }
            Ok(None) => {}
            Err(reason) => {
                cmd.refuse(reason);
                failure = Some(Reason::AtomicPushFailure);
                break;
            }
        }
    }
    let result = match failure {
        None if !updates.is_empty() => commit(
            store,
            &updates,
            true,
            &ctx.refs,
            ctx,
            committer,
            sb.stderr(),
            0,
        ),
        _ => Ok(Vec::new()),
    };
    give_back(cmds, &queued, updates, ctx);
    if let Err(e) = result {
        sb.error(&e)?;
        failure = Some(match &e {
            TransactionError::Prepare(refs::transaction::prepare::Error::Ref(
                refs::RefError::Gate { message },
            )) => Reason::Gate(message.clone()),
            _ => Reason::AtomicTransactionFailed,
        });
    }
    if let Some(reason) = failure {
        refuse_pending(cmds, reason);
    }
    Ok(())
}

/// The queued commands (`queued[k]` is the index of the command `updates[k]` came from) get
/// back the names [`decide`] lent to their updates.
fn give_back(cmds: &mut [Cmd], queued: &[usize], updates: Vec<RefUpdate>, ctx: &Decide<'_>) {
    for (&i, u) in queued.iter().zip(updates) {
        ctx.give_back(&mut cmds[i], u);
    }
}

/// The client's words, in a cluster, for a ref whose lock is taken: most likely by a push
/// accepted on another node, prepared here and waiting for its decision (which comes within a
/// couple of seconds even if that node died). git's words name the lock file's path on the
/// server: they go to the server's log only.
const HELD_IN_CLUSTER: &str = "cluster: ref is held by a push being decided; retry";
/// The client's words, in a cluster, for a ref whose lock cannot be created (the reason, with
/// the path, goes to the server's log).
const UNLOCKABLE_IN_CLUSTER: &str = "cluster: ref cannot be locked on this replica";

/// `e` in the cluster's words, if it is a lock that could not be taken ([`HELD_IN_CLUSTER`]);
/// `None`: `e` as it is.
fn lock_in_cluster_terms(e: &refs::RefError) -> Option<refs::RefError> {
    let held = match e {
        refs::RefError::Locked { lock, .. } | refs::RefError::PackedRefsLocked(lock) => {
            matches!(lock, refs::LockError::Held { .. })
        }
        _ => return None,
    };
    Some(locked_in_cluster(e, held))
}

/// The [`refs::RefError::Gate`] for a lock not taken (`held`: by another transaction), with
/// `e`, git's words, logged.
fn locked_in_cluster(e: &dyn std::fmt::Display, held: bool) -> refs::RefError {
    tracing::info!(target: "berth::receive", error = %crate::escape::Escaped::text(&e.to_string()), "ref lock not taken (replicated push)");
    let message = if held {
        HELD_IN_CLUSTER
    } else {
        UNLOCKABLE_IN_CLUSTER
    };
    refs::RefError::Gate {
        message: message.to_owned(),
    }
}

/// A replicated transaction's outcome with its lock failures in the cluster's words: a lock
/// is most likely held by another node's push, prepared here, and its path is the server's.
fn in_cluster_terms(
    r: Result<Vec<RefResult>, TransactionError>,
) -> Result<Vec<RefResult>, TransactionError> {
    use refs::transaction::prepare::Error as P;
    match r {
        Ok(results) => Ok(results
            .into_iter()
            .map(|r| match r {
                Err(e) => Err(lock_in_cluster_terms(&e).map_or(e, Box::new)),
                ok => ok,
            })
            .collect()),
        Err(TransactionError::Prepare(e)) => {
            let mapped = match &e {
                P::Ref(ref_error) => lock_in_cluster_terms(ref_error),
                P::Lock(lock) => Some(locked_in_cluster(
                    lock,
                    matches!(lock, refs::LockError::Held { .. }),
                )),
                P::ReftableLocked => Some(locked_in_cluster(&e, true)),
                _ => None,
            };
            Err(TransactionError::Prepare(mapped.map_or(e, P::Ref)))
        }
        Err(e) => Err(e),
    }
}

/// One ref transaction: prepared (locks taken, old values checked), then committed, with the
/// transaction's states told to the hooks (reference-transaction output on `diagnostics`);
/// replicated, with `retries` left for the refs a lost commit point did not touch, and its
/// lock failures in the cluster's words ([`in_cluster_terms`]).
#[allow(clippy::too_many_arguments)]
fn commit(
    store: &dyn RefStore,
    updates: &[RefUpdate],
    atomic: bool,
    current: &Refs,
    ctx: &Decide<'_>,
    committer: &gix_actor::Signature,
    diagnostics: &mut dyn Write,
    retries: u32,
) -> Result<Vec<RefResult>, TransactionError> {
    let r = transact(
        store,
        updates,
        atomic,
        current,
        ctx,
        committer,
        diagnostics,
        retries,
    );
    match ctx.gate {
        Some(_) => in_cluster_terms(r),
        None => r,
    }
}

/// [`commit`], in git's words.
#[allow(clippy::too_many_arguments)]
fn transact(
    store: &dyn RefStore,
    updates: &[RefUpdate],
    atomic: bool,
    current: &Refs,
    ctx: &Decide<'_>,
    committer: &gix_actor::Signature,
    diagnostics: &mut dyn Write,
    retries: u32,
) -> Result<Vec<RefResult>, TransactionError> {
    let options = refs::Options {
        atomicity: if atomic {
            Atomicity::AllOrNothing
        } else {
            Atomicity::PerRef
        },
        current,
        committer,
        objects: ctx.objects.settled(),
    };
    let mut observer = |state: TransactionState, batch: &[RefUpdate]| {
        ctx.hooks.transaction(state, batch, diagnostics)
    };
    // Replicated: the push's turn for these refs first, released after their locks (it is
    // dropped last).
    let _turn = ctx.gate.and_then(|g| g.turn(updates, ctx.repo.ref_format));
    let prepared = store.transaction(options).prepare(updates, &mut observer)?;
    let Some(gate) = ctx.gate else {
        return Ok(prepared.commit()?);
    };
    // Replicated: the cluster decides while this repository's locks are held.
    let batch: Vec<RefUpdate> = prepared.updates().cloned().collect();
    if batch.is_empty() {
        return Ok(prepared.commit()?);
    }
    let refuse = |results: Vec<RefResult>, text: String| {
        let message = format!("cluster: {text}");
        if atomic {
            return Err(TransactionError::Prepare(
                refs::transaction::prepare::Error::Ref(refs::RefError::Gate { message }),
            ));
        }
        Ok(results
            .into_iter()
            .map(|r| {
                r.and(Err(Box::new(refs::RefError::Gate {
                    message: message.clone(),
                })))
            })
            .collect())
    };
    match gate.decide(&batch, current) {
        Err(refusal) => {
            let mut results: Vec<RefResult> = vec![Ok(()); updates.len()];
            for (i, e) in prepared.failed() {
                results[i] = Err(Box::new(e.clone()));
            }
            drop(prepared);
            // The batch's positions among `updates` (the refs that prepared).
            let in_batch: Vec<usize> = (0..updates.len()).filter(|i| results[*i].is_ok()).collect();
            match refusal.lost {
                // Other pushes changed some of these refs first: those are refused, the rest
                // (whose old values still hold) go again in a transaction of their own.
                Some(lost)
                    if !atomic && retries > 0 && !lost.is_empty() && lost.len() < batch.len() =>
                {
                    let message = format!("cluster: {}", refusal.reason);
                    let mut again = Vec::with_capacity(in_batch.len());
                    for (k, &i) in in_batch.iter().enumerate() {
                        if lost.contains(&k) {
                            results[i] = Err(Box::new(refs::RefError::Gate {
                                message: message.clone(),
                            }));
                        } else {
                            again.push(i);
                        }
                    }
                    let subset: Vec<RefUpdate> =
                        again.iter().map(|&i| updates[i].clone()).collect();
                    let retried = commit(
                        store,
                        &subset,
                        false,
                        current,
                        ctx,
                        committer,
                        diagnostics,
                        retries - 1,
                    )?;
                    for (i, r) in again.into_iter().zip(retried) {
                        results[i] = r;
                    }
                    Ok(results)
                }
                _ => refuse(results, refusal.reason.to_string()),
            }
        }
        Ok(decided) => {
            let committed = prepared.commit();
            let finished = decided.finish(committed.is_ok());
            let results = committed?;
            match finished {
                Ok(()) => Ok(results),
                Err(why) => refuse(results, why.to_string()),
            }
        }
    }
}
