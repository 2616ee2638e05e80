//! The route table's tests.

use super::*;

fn name(s: &str) -> PreviewName {
    PreviewName::parse(s).unwrap()
}

fn table(lease: Duration) -> RouteTable<u32> {
    RouteTable::new(lease, 3)
}

const DAY: Duration = Duration::from_secs(86_400);

#[test]
fn an_end_reads_ended_survives_a_refused_claim_and_goes_with_its_name() {
    let t = RouteTable::new(Duration::from_millis(50), 3);
    let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
    let web = name("web");
    let (_, id) = t.claim(Some(web.clone()), &alice, |_, _| 1).unwrap();
    let past = Instant::now() - Duration::from_millis(1);
    t.set_ends(&web, Some(Instant::now() + DAY));
    assert!(matches!(t.lookup(&web), Lookup::Live(1)));
    // Bob's refused claim leaves alice's end as it was.
    assert!(t.claim(Some(web.clone()), &bob, |_, _| 2).is_err());
    assert_eq!(t.ends_at(&web).map(|at| at > Instant::now()), Some(true));
    t.set_ends(&web, Some(past));
    assert!(matches!(t.lookup(&web), Lookup::Ended));
    // The sweep stops serving it; it stays ended while held.
    t.sweep(|_| {});
    assert_eq!(t.live_count(&alice), 0);
    assert!(matches!(t.lookup(&web), Lookup::Ended));
    assert!(!t.release(&web, id), "no longer live");
    // Its owner binds it again: no end.
    t.claim(Some(web.clone()), &alice, |_, _| 3).unwrap();
    assert!(matches!(t.lookup(&web), Lookup::Live(3)));
    assert_eq!(t.ends_at(&web), None);
    // Ended and past its lease: gone, end and all.
    t.set_ends(&web, Some(past));
    t.sweep(|_| {});
    std::thread::sleep(Duration::from_millis(60));
    t.sweep(|_| {});
    assert!(matches!(t.lookup(&web), Lookup::Unknown));
    assert_eq!(t.ends_at(&web), None);
    assert_eq!(t.ending.load(Ordering::Relaxed), 0);
}

#[test]
fn claim_lookup_release() {
    let t = table(DAY);
    let alice = AccountId::new("alice");
    let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 7).unwrap();
    assert_eq!(n, name("web"));
    assert!(matches!(t.lookup(&n), Lookup::Live(7)));
    assert!(t.release(&n, id));
    assert!(matches!(t.lookup(&n), Lookup::Unknown));
    assert!(!t.release(&n, id), "a second release finds nothing");
    assert_eq!(t.live_count(&alice), 0);
}

#[test]
fn generated_names_are_fresh() {
    let t = table(DAY);
    let alice = AccountId::new("alice");
    let (a, _) = t.claim(None, &alice, |_, _| 1).unwrap();
    let (b, _) = t.claim(None, &alice, |_, _| 2).unwrap();
    assert_ne!(a, b);
    assert!(matches!(t.lookup(&a), Lookup::Live(1)));
    assert!(matches!(t.lookup(&b), Lookup::Live(2)));
}

#[test]
fn another_account_cannot_take_a_name_live_or_held() {
    let t = table(DAY);
    let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
    let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
    let err = t.claim(Some(n.clone()), &bob, |_, _| 2).unwrap_err();
    assert_eq!(err, ClaimError::Taken(n.clone()));
    assert_eq!(err.to_string(), "the name web belongs to another account");

    t.release(&n, id);
    assert_eq!(
        t.claim(Some(n.clone()), &bob, |_, _| 2),
        Err(ClaimError::Taken(n.clone()))
    );
    t.claim(Some(n.clone()), &alice, |_, _| 3).unwrap();
    assert!(matches!(t.lookup(&n), Lookup::Live(3)));
}

#[tokio::test]
async fn a_waiter_wakes_when_its_name_comes_back() {
    let t = table(Duration::from_secs(60));
    let alice = AccountId::new("alice");
    let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
    assert!(t.disconnect(&n, id));
    let changed = t.changed(&n).expect("a held name has a signal");
    let woken = changed.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    assert!(matches!(t.lookup(&n), Lookup::Offline));
    t.claim(Some(n.clone()), &alice, |_, _| 2).unwrap();
    tokio::time::timeout(Duration::from_secs(1), woken)
        .await
        .expect("the claim wakes the waiter");
    assert!(matches!(t.lookup(&n), Lookup::Live(2)));
    assert!(t.changed(&name("other")).is_none());
}

#[test]
fn a_disconnect_reads_offline_until_the_owner_returns() {
    let t = table(DAY);
    let alice = AccountId::new("alice");
    let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
    assert!(t.disconnect(&n, id));
    assert!(matches!(t.lookup(&n), Lookup::Offline));
    t.claim(Some(n.clone()), &alice, |_, _| 2).unwrap();
    assert!(matches!(t.lookup(&n), Lookup::Live(2)));
}

#[test]
fn a_replaced_binding_cannot_release_its_successor() {
    let t = table(DAY);
    let alice = AccountId::new("alice");
    let (n, old) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
    let (_, new) = t.claim(Some(n.clone()), &alice, |_, _| 2).unwrap();
    assert!(!t.disconnect(&n, old));
    assert!(matches!(t.lookup(&n), Lookup::Live(2)));
    assert_eq!(
        t.live_count(&alice),
        1,
        "a takeover is not a second preview"
    );
    assert!(t.release(&n, new));
}

#[test]
fn lease_expiry_frees_the_name() {
    let t = table(Duration::ZERO);
    let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
    let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
    t.disconnect(&n, id);
    assert!(matches!(t.lookup(&n), Lookup::Unknown));
    t.claim(Some(n.clone()), &bob, |_, _| 2).unwrap();
    assert!(matches!(t.lookup(&n), Lookup::Live(2)));
}

#[test]
fn names_served_before_a_restart_come_back_until_claimed_or_the_window_ends() {
    let t = table(DAY);
    let alice = AccountId::new("alice");
    let (web, api, docs) = (name("web"), name("api"), name("docs"));
    t.expect_back(
        [web.clone(), api.clone(), docs.clone()],
        Instant::now() + DAY,
    );
    // Only the names served before are expected; another is unknown.
    assert!(t.is_coming_back(&web) && t.is_coming_back(&api));
    assert!(!t.is_coming_back(&name("typo")));
    // Back, then taken down: the table answers from then on.
    let (_, id) = t.claim(Some(web.clone()), &alice, |_, _| 1).unwrap();
    assert!(!t.is_coming_back(&web));
    assert!(t.release(&web, id));
    assert!(matches!(t.lookup(&web), Lookup::Unknown));
    assert!(!t.is_coming_back(&web));
    // Held by the cluster's store: not coming back either.
    t.hold(api.clone(), &alice, false);
    assert!(!t.is_coming_back(&api));
    // A second call does not open another window.
    t.expect_back([name("late")], Instant::now() + DAY);
    assert!(!t.is_coming_back(&name("late")));
    assert!(t.is_coming_back(&docs));

    // A claim refused (the cap) leaves the name expected.
    let capped = RouteTable::new(DAY, 1);
    capped.expect_back([web.clone()], Instant::now() + DAY);
    capped.claim(Some(api.clone()), &alice, |_, _| 1).unwrap();
    assert!(capped.claim(Some(web.clone()), &alice, |_, _| 2).is_err());
    assert!(capped.is_coming_back(&web));

    // Past the window nothing is coming back, and the sweep forgets.
    let over = table(DAY);
    over.expect_back([docs.clone()], Instant::now() - Duration::from_millis(1));
    assert!(!over.is_coming_back(&docs));
    assert_eq!(over.returning.count(), 1);
    over.sweep(|_| {});
    assert_eq!(over.returning.count(), 0);
}

#[test]
fn kept_names_are_the_served_and_the_held_with_their_owners() {
    let t = table(DAY);
    let alice = AccountId::new("alice");
    let (_, web) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
    let (_, api) = t.claim(Some(name("api")), &alice, |_, _| 2).unwrap();
    t.claim(Some(name("docs")), &alice, |_, _| 3).unwrap();
    t.disconnect(&name("web"), web);
    t.release(&name("api"), api);
    // A name still expected back that the table has no entry for.
    t.expect_back([name("away")], Instant::now() + DAY);
    let mut kept: Vec<_> = t
        .kept_names()
        .into_iter()
        .map(|k| {
            (
                k.name.to_string(),
                k.account.map(|a| a.to_string()),
                k.served,
            )
        })
        .collect();
    kept.sort();
    let alice = || Some("alice".to_owned());
    assert_eq!(
        kept,
        vec![
            ("api".into(), alice(), false),
            ("away".into(), None, true),
            ("docs".into(), alice(), true),
            ("web".into(), alice(), true),
        ]
    );
}

#[test]
fn sweep_forgets_only_expired_names() {
    let t = table(Duration::ZERO);
    let alice = AccountId::new("alice");
    let (n, id) = t.claim(Some(name("gone")), &alice, |_, _| 1).unwrap();
    t.claim(Some(name("kept")), &alice, |_, _| 2).unwrap();
    t.release(&n, id);
    assert_eq!(t.len(), 2);
    t.sweep(|_| {});
    assert_eq!(t.len(), 1);
    assert!(matches!(t.lookup(&name("kept")), Lookup::Live(2)));
}

#[test]
fn per_account_cap_at_the_limit_and_one_past() {
    let t = table(DAY);
    let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
    for i in 0..3 {
        t.claim(Some(name(&format!("a{i}"))), &alice, |_, _| i)
            .unwrap();
    }
    assert_eq!(t.live_count(&alice), 3);
    assert_eq!(
        t.claim(Some(name("a3")), &alice, |_, _| 9),
        Err(ClaimError::LimitReached(3))
    );
    assert!(matches!(t.lookup(&name("a3")), Lookup::Unknown));
    // Re-claiming a name it serves is not one more.
    t.claim(Some(name("a0")), &alice, |_, _| 5).unwrap();
    // Others are not affected.
    t.claim(Some(name("b0")), &bob, |_, _| 1).unwrap();
}

#[test]
fn a_granted_claim_replaces_what_the_table_held_and_keeps_the_cap() {
    let t = table(DAY);
    let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
    // Bob's name, mirrored from another edge, then taken down there.
    let id = t.mirror(name("web"), &bob, |_, _| 1);
    assert!(t.release(&name("web"), id));
    // The store gave it to alice (bob's reservation ended there).
    t.claim_granted(name("web"), &alice, |_, _| 2).unwrap();
    assert!(matches!(t.lookup(&name("web")), Lookup::Live(2)));
    assert_eq!((t.live_count(&alice), t.live_count(&bob)), (1, 0));
    for i in 1..3 {
        t.claim_granted(name(&format!("a{i}")), &alice, |_, _| 3)
            .unwrap();
    }
    assert_eq!(
        t.claim_granted(name("a3"), &alice, |_, _| 4),
        Err(ClaimError::LimitReached(3))
    );
    assert_eq!(
        t.may_claim(Some(&name("a3")), &alice),
        Err(ClaimError::LimitReached(3))
    );
    // A name it serves already is not one more.
    assert_eq!(t.may_claim(Some(&name("a1")), &alice), Ok(()));
    assert_eq!(t.may_claim(None, &bob), Ok(()));
}

#[test]
fn a_mirrored_binding_counts_for_its_account_past_the_cap() {
    let t = table(DAY);
    let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
    for i in 0..4 {
        t.mirror(name(&format!("m{i}")), &alice, |_, _| i);
    }
    assert_eq!(
        t.live_count(&alice),
        4,
        "the edge holding them checked the cap"
    );
    // Moved to another account's agent (the store said so): the
    // counts follow.
    t.mirror(name("m0"), &bob, |_, _| 9);
    assert_eq!((t.live_count(&alice), t.live_count(&bob)), (3, 1));
    assert!(matches!(t.lookup(&name("m0")), Lookup::Live(9)));
    assert_eq!(t.live_total(), 4);
}

#[test]
fn a_hold_reads_offline_but_never_hides_a_live_binding() {
    let t = table(DAY);
    let alice = AccountId::new("alice");
    t.hold(name("gone"), &alice, true);
    assert!(matches!(t.lookup(&name("gone")), Lookup::Offline));
    t.hold(name("down"), &alice, false);
    assert!(matches!(t.lookup(&name("down")), Lookup::Unknown));
    t.claim(Some(name("live")), &alice, |_, _| 1).unwrap();
    t.hold(name("live"), &alice, true);
    assert!(matches!(t.lookup(&name("live")), Lookup::Live(1)));
    assert!(t.is_live(&name("live")) && !t.is_live(&name("gone")));
    // Only alice may claim what is held for her, here too.
    assert_eq!(
        t.claim(Some(name("gone")), &AccountId::new("bob"), |_, _| 2),
        Err(ClaimError::Taken(name("gone")))
    );
}

#[tokio::test]
async fn a_hold_wakes_a_request_waiting_for_an_unknown_name() {
    let t = table(DAY);
    let woken = t.added().notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    t.hold(name("soon"), &AccountId::new("alice"), true);
    tokio::time::timeout(Duration::from_secs(1), woken)
        .await
        .expect("a new entry wakes who waits for one");
}
