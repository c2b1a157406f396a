//! Which hub keeps the cluster's work queues: a lease in a JetStream key-value bucket
//! (`agentwire_<cluster>_owner`, key `queues`, value the hub id), and what each hub does about
//! it.
//!
//! The hub holding the lease renews it every beat; an entry not renewed expires after the
//! cluster's expiry, and the first hub to create it again takes the queues over: it reads
//! them from the [`JetStreamStore`] and keeps them from then on
//! ([`Hub::take_over_queues`]). Every other hub runs a stand-in for the owner (agent id
//! [`QUEUE_OWNER_ID`](agentwire::hub::QUEUE_OWNER_ID)), through which its hub core passes its
//! agents' queue work on, and names its consumers again whenever the owner changes
//! ([`Hub::queues_moved`]). A hub that fails to renew stops writing at once (the store's
//! fence), gives the queues up ([`Hub::give_up_queues`]) and passes its agents' queue work
//! on again.
//!
//! It must not route or decide about tasks: the hub cores do.

use agentwire_sync::LockExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire::hub::Hub;
use async_nats::jetstream::{self, kv};

use crate::error::ClusterError;
use crate::lease::Lease;
use crate::link::{queue_owner_stand_in, Shared, StandInFeed, StandInSender};
use crate::store::{JetStreamStore, StoreLayout};

/// The lease's key.
const KEY: &str = "queues";

/// This hub's part in keeping the queues.
pub(crate) struct Ownership {
    hub: Hub,
    shared: Arc<Shared>,
    kv: kv::Store,
    layout: StoreLayout,
    /// This hub's view of the lease (the store's fence).
    lease: Arc<Lease>,
    revision: Mutex<Option<u64>>,
    /// How long the lease lives without renewal.
    expiry: Duration,
    /// The hub's heartbeat (for the owner's stand-in).
    heartbeat: Duration,
    /// The owner's stand-in while another hub keeps the queues. Its feed carries nothing
    /// (answers settle requests directly), but is kept: the stand-in ends when it is dropped.
    stand_in: Mutex<Option<(StandInFeed, StandInSender)>>,
}

impl Ownership {
    /// Makes the stream and the lease bucket if needed, starts the owner's stand-in, and
    /// takes the queues over if no hub holds them.
    pub(crate) async fn start(
        hub: Hub,
        shared: Arc<Shared>,
        cluster: &str,
        replicas: usize,
        expiry: Duration,
        heartbeat: Duration,
    ) -> Result<Arc<Ownership>, ClusterError> {
        let layout = StoreLayout {
            replicas,
            ..StoreLayout::for_cluster(cluster)
        };
        // Writes stop three quarters into the lease's life without a renewal; the rest is
        // for writes already on their way.
        let lease = Arc::new(Lease::new(expiry * 3 / 4));
        // Makes the stream now, so that a NATS without JetStream is an error at start.
        JetStreamStore::open(shared.nats.clone(), &layout, &shared.hub, lease.clone())
            .await
            .map_err(ClusterError::Queues)?;
        let js = jetstream::new(shared.nats.clone());
        let bucket = format!("agentwire_{cluster}_owner");
        let kv = match js.get_key_value(&bucket).await {
            Ok(kv) => kv,
            Err(_) => js
                .create_key_value(kv::Config {
                    bucket: bucket.clone(),
                    history: 1,
                    max_age: expiry,
                    num_replicas: crate::store::replicas_for(&shared.nats, replicas),
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| ClusterError::Lease(e.to_string()))?,
        };
        let ownership = Arc::new(Ownership {
            hub,
            shared,
            kv,
            layout,
            lease,
            revision: Mutex::new(None),
            expiry,
            heartbeat,
            stand_in: Mutex::new(None),
        });
        ownership.start_stand_in().await;
        ownership.round().await;
        Ok(ownership)
    }

    fn lock_stand_in(&self) -> std::sync::MutexGuard<'_, Option<(StandInFeed, StandInSender)>> {
        self.stand_in.lock_or_recover()
    }

    fn owns(&self) -> bool {
        self.lease.held()
    }

    /// Runs the owner's stand-in on the hub and waits (up to 2 s) until the hub core has
    /// registered it.
    async fn start_stand_in(&self) {
        let (sender, receiver, feed) =
            match queue_owner_stand_in(self.shared.clone(), self.heartbeat) {
                Ok(parts) => parts,
                Err(e) => {
                    tracing::error!("cannot start the queue owner's stand-in: {e}");
                    return;
                }
            };
        *self.lock_stand_in() = Some((feed, sender.clone()));
        let hub = self.hub.clone();
        tokio::spawn(async move { hub.serve_connection(sender, receiver).await });
        for _ in 0..200 {
            if self.hub.agent(agentwire::hub::QUEUE_OWNER_ID).is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tracing::warn!("the queue owner's stand-in did not register within 2 s");
    }

    /// One beat: renew the lease, or learn who holds it, or take it.
    pub(crate) async fn round(&self) {
        if self.owns() {
            self.renew().await;
            return;
        }
        match self.kv.entry(KEY).await {
            Ok(Some(entry)) if entry.operation == kv::Operation::Put => {
                let owner = String::from_utf8_lossy(&entry.value).into_owned();
                // This hub's own lease, lost: wait for it to expire.
                if owner != self.shared.hub {
                    self.set_owner(owner);
                }
            }
            Ok(_) => {
                let sent = Instant::now();
                match self.kv.create(KEY, self.shared.hub.clone().into()).await {
                    Ok(rev) => self.take_over(rev, sent).await,
                    Err(e) => tracing::debug!("another hub took the queue lease first: {e}"),
                }
            }
            Err(e) => tracing::warn!("cannot read the queue owner's lease: {e}"),
        }
    }

    /// Renews the lease. A failure is tried again at the next beat while the lease has time
    /// left (NATS electing new leaders after a node died answers errors for a few seconds);
    /// the lease is taken as lost once half the expiry has gone by without a renewal (so
    /// this hub stops writing well before another hub can take the queues), or at once when
    /// another hub holds it.
    async fn renew(&self) {
        let revision = *self.lock_revision();
        let Some(rev) = revision else {
            return self.lost("no revision of the lease").await;
        };
        let id: bytes::Bytes = self.shared.hub.clone().into();
        let sent = Instant::now();
        match self.kv.update(KEY, id.clone(), rev).await {
            Ok(rev) => {
                *self.lock_revision() = Some(rev);
                self.lease.renewed(sent);
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                // Our last renewal may have been stored without its answer reaching us.
                match self.kv.entry(KEY).await {
                    Ok(Some(entry))
                        if entry.operation == kv::Operation::Put && entry.value == id =>
                    {
                        *self.lock_revision() = Some(entry.revision);
                    }
                    _ => self.lost("another hub holds the lease").await,
                }
            }
            Err(e) => {
                let since = self.lease.since_renewal();
                if since >= self.expiry / 2 {
                    self.lost(&format!("not renewed for {since:?}: {e}")).await;
                } else {
                    tracing::warn!("cannot renew the queue owner's lease yet, trying again: {e}");
                }
            }
        }
    }

    /// The lease is lost: no more writes at once; then the queues go back to whoever holds
    /// the lease next (this hub passes its agents' queue work on again, and may take the
    /// queues over again later).
    async fn lost(&self, why: &str) {
        self.lease.revoke();
        tracing::error!("lost the queue owner's lease ({why}); passing queue work on again");
        // The stand-in first, so that queue work never falls to the hub's in-memory queues.
        self.start_stand_in().await;
        self.hub.give_up_queues();
        self.shared.owns_queues.store(false, Ordering::Relaxed);
    }

    fn lock_revision(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.revision.lock_or_recover()
    }

    fn set_owner(&self, owner: String) {
        let changed = {
            let mut current = self.shared.queue_owner.lock_or_recover();
            let changed = current.as_deref() != Some(owner.as_str());
            *current = Some(owner.clone());
            changed
        };
        if changed {
            tracing::info!(owner = %owner, "the work queues are kept by hub {owner}");
            self.hub.queues_moved();
        }
    }

    async fn take_over(&self, revision: u64, sent: Instant) {
        *self.lock_revision() = Some(revision);
        self.lease.granted(sent);
        let opened = async {
            let mut store = JetStreamStore::open(
                self.shared.nats.clone(),
                &self.layout,
                &self.shared.hub,
                self.lease.clone(),
            )
            .await?;
            store.claim().await?;
            store.preload().await?;
            Ok::<_, agentwire_queue::StoreError>(store)
        }
        .await;
        let store = match opened {
            Ok(store) => store,
            Err(e) => {
                tracing::error!(
                    "cannot read the work queues from JetStream: {}",
                    e.with_causes()
                );
                self.give_up().await;
                return;
            }
        };
        if let Err(e) = self.hub.take_over_queues(Box::new(store)) {
            tracing::error!(
                "cannot take the work queues over: {}",
                agentwire::error_chain(&e)
            );
            self.give_up().await;
            return;
        }
        self.shared.owns_queues.store(true, Ordering::Relaxed);
        *self.shared.queue_owner.lock_or_recover() = None;
        // Queue work no longer goes to the stand-in; it can go.
        if let Some((_, sender)) = self.lock_stand_in().take() {
            agentwire::transport::FrameSender::close(
                &sender,
                agentwire::ErrorCode::Normal,
                "this hub keeps the queues now",
            );
        }
        tracing::info!(hub = %self.shared.hub, "this hub keeps the work queues now");
    }

    /// Lets the lease go (another hub takes the queues over at once).
    pub(crate) async fn give_up(&self) {
        let held = self.lease.take();
        if held {
            if let Err(e) = self.kv.delete(KEY).await {
                tracing::warn!("cannot release the queue owner's lease: {e}");
            }
        }
    }
}
