//! Each edge follows the cluster's keys in etcd into its own route table,
//! so a visitor's request never waits on etcd: a name another edge serves
//! is bound here to an upstream through that edge (over the peer
//! connection), a name whose edge is gone reads "offline" until its agent
//! is back on another edge, and a name taken down reads as unknown.
//!
//! One task reads a snapshot, applies it, then watches from the
//! snapshot's revision; when the watch breaks (etcd unreachable) the table
//! keeps what it has and the task reads a new snapshot once etcd answers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use calvin_proto::PreviewName;
use etcd_client::{EventType, WatchOptions};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::store::{EDGES, NAMES, NameRecord, NameState, PREFIX, ROUTES, RouteRecord, Store};
use crate::accounts::AccountId;
use crate::share::Protection;
use crate::upstream::route_table::RouteId;
use crate::upstream::tunnel::AgentHub;
use crate::upstream::{AgentLink, Upstream};

/// The first wait before reading etcd again after a failure, and the most.
const RETRY_MIN: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// What this edge knows of the cluster, and what it put in its table.
#[derive(Default)]
struct View {
    routes: HashMap<PreviewName, RouteRecord>,
    /// The store's revision of each route's last change.
    route_revisions: HashMap<PreviewName, i64>,
    names: HashMap<PreviewName, NameRecord>,
    edges: HashMap<String, super::store::EdgeRecord>,
    /// Names bound here to another edge's agent.
    mirrored: HashMap<PreviewName, Mirrored>,
    /// Connections to other edges, by advertised address.
    peers: HashMap<String, Peer>,
}

struct Mirrored {
    id: RouteId,
    route: RouteRecord,
    /// The peer connection the upstream uses.
    connection: usize,
}

enum Peer {
    Dialing,
    Up {
        conn: quinn::Connection,
        links: HashMap<AccountId, Arc<AgentLink>>,
    },
}

/// The cluster's view, as this edge follows it.
pub struct Mirror {
    store: Arc<Store>,
    hub: Arc<AgentHub>,
    endpoint: quinn::Endpoint,
    view: Mutex<View>,
    /// Turns true once the first snapshot is applied.
    synced: watch::Sender<bool>,
    /// Turns true when the edge leaves: dialling stops.
    leaving: watch::Sender<bool>,
    /// The zone's addresses: every live edge's (for the DNS answers).
    addresses: watch::Sender<Vec<std::net::IpAddr>>,
}

impl Mirror {
    pub(crate) fn new(
        store: Arc<Store>,
        hub: Arc<AgentHub>,
        endpoint: quinn::Endpoint,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            hub,
            endpoint,
            view: Mutex::default(),
            synced: watch::channel(false).0,
            leaving: watch::channel(false).0,
            addresses: watch::channel(Vec::new()).0,
        })
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cluster as the metrics show it.
    pub fn now(&self) -> crate::ops::metrics::ClusterNow {
        let view = self.view();
        crate::ops::metrics::ClusterNow {
            store_up: *self.store.up().borrow(),
            peers: view
                .peers
                .values()
                .filter(|p| matches!(p, Peer::Up { conn, .. } if conn.close_reason().is_none()))
                .count() as u64,
            previews_elsewhere: view.mirrored.len() as u64,
        }
    }

    /// True once the first snapshot is in the table.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Every live edge's public addresses, as they change.
    pub fn addresses(&self) -> watch::Receiver<Vec<std::net::IpAddr>> {
        self.addresses.subscribe()
    }

    /// Follows etcd until `stop`.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let leaving = self.clone();
        let _leave = Defer(move || {
            leaving.leaving.send_replace(true);
        });
        let mut wait = RETRY_MIN;
        loop {
            let followed = tokio::select! {
                followed = self.follow() => followed,
                _ = stop.wait_for(|s| *s) => return,
            };
            if let Err(err) = followed {
                debug!(%err, "following the cluster's store; trying again");
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            wait = (wait * 2).min(RETRY_MAX);
        }
    }

    /// One snapshot and the watch after it, until the watch breaks.
    async fn follow(self: &Arc<Self>) -> Result<(), String> {
        let (kvs, revision) = self.store.snapshot().await?;
        {
            let mut fresh = View::default();
            for (key, value, revision) in &kvs {
                apply_put(&mut fresh, key, value, *revision);
            }
            let mut view = self.view();
            let touched: Vec<PreviewName> = view
                .routes
                .keys()
                .chain(view.names.keys())
                .chain(fresh.routes.keys())
                .chain(fresh.names.keys())
                .cloned()
                .collect();
            view.routes = fresh.routes;
            view.route_revisions = fresh.route_revisions;
            view.names = fresh.names;
            view.edges = fresh.edges;
            for name in touched {
                self.reconcile(&mut view, &name);
            }
            self.publish_addresses(&view);
        }
        if !*self.synced.borrow() {
            info!(names = kvs.len(), "the cluster's routes are in the table");
        }
        self.synced.send_replace(true);
        let mut client = self.store.client();
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(revision + 1);
        let mut stream = client
            .watch(PREFIX, Some(options))
            .await
            .map_err(|e| e.to_string())?;
        while let Some(answer) = stream.message().await.map_err(|e| e.to_string())? {
            if answer.canceled() {
                return Err(format!("watch canceled: {}", answer.cancel_reason()));
            }
            let mut view = self.view();
            let mut touched = Vec::new();
            let mut edges_changed = false;
            for event in answer.events() {
                let Some(kv) = event.kv() else { continue };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                edges_changed |= key.starts_with(EDGES);
                match event.event_type() {
                    EventType::Put => apply_put(&mut view, &key, kv.value(), kv.mod_revision()),
                    EventType::Delete => apply_delete(&mut view, &key),
                }
                if let Some(name) = name_of(&key) {
                    touched.push(name);
                }
            }
            for name in touched {
                self.reconcile(&mut view, &name);
            }
            if edges_changed {
                self.publish_addresses(&view);
            }
        }
        Err("the watch ended".into())
    }

    fn publish_addresses(&self, view: &View) {
        let mut addresses: Vec<_> = view
            .edges
            .values()
            .flat_map(|edge| edge.addresses.iter().copied())
            .collect();
        addresses.sort();
        addresses.dedup();
        self.addresses.send_if_modified(|now| {
            let changed = *now != addresses;
            *now = addresses;
            changed
        });
    }

    /// Makes the table say what the view says of `name`.
    fn reconcile(self: &Arc<Self>, view: &mut View, name: &PreviewName) {
        let routes = &self.hub.routes;
        let route = view
            .routes
            .get(name)
            .filter(|route| route.edge != self.store.me())
            .cloned();
        let Some(route) = route else {
            // Served here, or by no edge.
            let Some(gone) = view.mirrored.remove(name) else {
                if !routes.is_live(name) {
                    self.hold_reserved(view, name);
                }
                return;
            };
            if view.routes.contains_key(name) {
                // This edge's agent has it now; its binding replaced the
                // mirrored one already (were the mirrored one still
                // there, it reads offline rather than sending visitors to
                // an edge the agent left).
                routes.disconnect(name, gone.id);
                return;
            }
            let released = view
                .names
                .get(name)
                .is_some_and(|n| n.state == NameState::Released);
            if released {
                routes.release(name, gone.id);
            } else {
                routes.disconnect(name, gone.id);
            }
            return;
        };
        // Another edge's route. Older than this edge's own claim of the
        // name, it is a view not caught up yet (a snapshot read before the
        // claim, an event on its way): the claim's own event follows.
        // Newer, the agent moved there: this edge lets its claim go.
        let revision = view.route_revisions.get(name).copied().unwrap_or(0);
        match self.store.claimed_at(name) {
            Some(ours) if ours > revision => return,
            Some(_) => self.store.forget(name),
            None => {}
        }
        let account = AccountId::new(&route.account);
        let link = match view.peers.get_mut(&route.edge) {
            Some(Peer::Up { conn, links }) if conn.close_reason().is_none() => {
                let hub = &self.hub;
                links
                    .entry(account.clone())
                    .or_insert_with(|| {
                        let streams = hub
                            .account_streams
                            .entry(account.clone())
                            .or_default()
                            .clone();
                        AgentLink::through_peer(
                            conn.clone(),
                            hub.upstream.clone(),
                            streams,
                            hub.upstream.bandwidth.for_account(&account),
                        )
                    })
                    .clone()
            }
            Some(_) => {
                // Not reached yet: the name waits, offline, for the
                // connection.
                self.unmirror_offline(view, name, &account);
                return;
            }
            None => {
                view.peers.insert(route.edge.clone(), Peer::Dialing);
                tokio::spawn(self.clone().dial(route.edge.clone()));
                self.unmirror_offline(view, name, &account);
                return;
            }
        };
        let current = view.mirrored.get(name).is_some_and(|m| {
            m.route == route && m.connection == link.connection_id() && routes.is_live(name)
        });
        if current {
            return;
        }
        let port = route.port;
        let protection = route
            .protect
            .clone()
            .map(|salt| Protection::new(self.hub.share_key.clone(), salt));
        let id = routes.mirror(name.clone(), &account, |name, _| {
            Upstream::new(name.clone(), port, link.clone(), protection)
        });
        routes.set_ends(name, route.ends_ms.map(unix_instant));
        debug!(%name, edge = %route.edge, "mirrored another edge's preview");
        view.mirrored.insert(
            name.clone(),
            Mirrored {
                id,
                route,
                connection: link.connection_id(),
            },
        );
    }

    /// A name whose edge this one cannot reach now reads offline.
    fn unmirror_offline(&self, view: &mut View, name: &PreviewName, account: &AccountId) {
        if let Some(gone) = view.mirrored.remove(name) {
            self.hub.routes.disconnect(name, gone.id);
        }
        self.hub.routes.hold(name.clone(), account, true);
    }

    /// A name no edge serves, reserved in the store: offline if its agent
    /// left (or its edge died with it), else (taken down) as the table has
    /// it.
    fn hold_reserved(&self, view: &View, name: &PreviewName) {
        let Some(record) = view.names.get(name) else {
            return;
        };
        let reserved = record.until > crate::unix_now();
        if reserved && record.state != NameState::Released {
            self.hub
                .routes
                .hold(name.clone(), &AccountId::new(&record.account), true);
        }
        if reserved && let Some(ends) = record.ends_ms {
            if record.state == NameState::Released {
                self.hub
                    .routes
                    .hold(name.clone(), &AccountId::new(&record.account), false);
            }
            self.hub.routes.set_ends(name, Some(unix_instant(ends)));
        }
    }

    /// Dials another edge until it answers or serves nothing any more,
    /// then binds its names here, and watches the connection.
    async fn dial(self: Arc<Self>, edge: String) {
        let mut leaving = self.leaving.subscribe();
        let mut wait = RETRY_MIN;
        let conn = loop {
            let dialled = tokio::select! {
                dialled = super::peer::dial(&self.endpoint, &edge) => dialled,
                _ = leaving.wait_for(|l| *l) => return,
            };
            match dialled {
                Ok(conn) => break conn,
                Err(err) => warn!(%edge, %err, "cannot reach another edge of the cluster"),
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = leaving.wait_for(|l| *l) => return,
            }
            wait = (wait * 2).min(RETRY_MAX);
            let mut view = self.view();
            if !view.routes.values().any(|r| r.edge == edge) {
                view.peers.remove(&edge);
                return;
            }
        };
        info!(%edge, "connected to another edge of the cluster");
        {
            let mut view = self.view();
            view.peers.insert(
                edge.clone(),
                Peer::Up {
                    conn: conn.clone(),
                    links: HashMap::new(),
                },
            );
            self.reconcile_edge(&mut view, &edge);
        }
        let reason = tokio::select! {
            reason = conn.closed() => reason,
            _ = leaving.wait_for(|l| *l) => return,
        };
        info!(%edge, %reason, "the connection to another edge of the cluster ended");
        let mut view = self.view();
        let ours = matches!(view.peers.get(&edge),
            Some(Peer::Up { conn: c, .. }) if c.stable_id() == conn.stable_id());
        if ours {
            view.peers.remove(&edge);
            // Its names read offline, or are bound again to a new
            // connection (dialled now if the edge still has routes).
            self.reconcile_edge(&mut view, &edge);
        }
    }

    fn reconcile_edge(self: &Arc<Self>, view: &mut View, edge: &str) {
        let names: Vec<PreviewName> = view
            .routes
            .iter()
            .filter(|(_, r)| r.edge == edge)
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            self.reconcile(view, &name);
        }
    }
}

/// The preview name a `routes/` or `names/` key is about.
fn name_of(key: &str) -> Option<PreviewName> {
    let name = key
        .strip_prefix(ROUTES)
        .or_else(|| key.strip_prefix(NAMES))?;
    PreviewName::parse(name).ok()
}

fn apply_put(view: &mut View, key: &str, value: &[u8], revision: i64) {
    if let Some(name) = key.strip_prefix(ROUTES) {
        if let (Ok(name), Ok(route)) = (
            PreviewName::parse(name),
            serde_json::from_slice::<RouteRecord>(value),
        ) {
            view.route_revisions.insert(name.clone(), revision);
            view.routes.insert(name, route);
        }
    } else if let Some(name) = key.strip_prefix(NAMES) {
        if let (Ok(name), Ok(record)) = (
            PreviewName::parse(name),
            serde_json::from_slice::<NameRecord>(value),
        ) {
            view.names.insert(name, record);
        }
    } else if let Some(edge) = key.strip_prefix(EDGES)
        && let Ok(record) = serde_json::from_slice(value)
    {
        view.edges.insert(edge.to_owned(), record);
    }
}

fn apply_delete(view: &mut View, key: &str) {
    if let Some(name) = key.strip_prefix(ROUTES) {
        if let Ok(name) = PreviewName::parse(name) {
            view.routes.remove(&name);
            view.route_revisions.remove(&name);
        }
    } else if let Some(name) = key.strip_prefix(NAMES) {
        if let Ok(name) = PreviewName::parse(name) {
            view.names.remove(&name);
        }
    } else if let Some(edge) = key.strip_prefix(EDGES) {
        view.edges.remove(edge);
    }
}

/// Runs its closure when dropped (the mirror's task ends or is aborted).
struct Defer<F: FnMut()>(F);

impl<F: FnMut()> Drop for Defer<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// This process's instant at `ms` Unix milliseconds (the far future past
/// what the clock can hold).
fn unix_instant(ms: u64) -> std::time::Instant {
    let at = std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(ms));
    match at {
        Some(at) => crate::upstream::tunnel::instant_at(at),
        None => std::time::Instant::now() + std::time::Duration::from_secs(86_400 * 365),
    }
}
