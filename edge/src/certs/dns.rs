//! Authoritative DNS for the preview zone, so a public edge needs nothing
//! but the zone delegated to it.
//!
//! The zone is small and mostly computed: SOA and NS at the apex, A/AAAA of
//! the edge's public addresses for the apex and every preview name, optional
//! CAA, and the `_acme-challenge` TXT values the ACME client sets while an
//! order is open ([`Challenges`]). Names outside the zone are REFUSED; there
//! is no recursion. hickory-server runs the sockets and the wire format
//! (truncation included: an answer too big for UDP goes out with TC set);
//! [`ZoneAnswers`] decides the answers. hickory's own in-memory zone answers
//! NXDOMAIN for a wildcard-covered name asked for a type it lacks (hickory-dns
//! issues 2905 and 3893), where the answer must be NODATA.

use crate::counts::Counts;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_proto::op::{Edns, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CAA, NS, SOA, TXT};
use hickory_proto::rr::{DNSClass, LowerName, Name, RData, Record, RecordType};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tokio::net::{TcpListener, UdpSocket};
use tracing::{debug, warn};

/// TTL of the challenge TXT records: short, so a resolver that cached an
/// old value asks again soon.
const CHALLENGE_TTL: u32 = 30;
/// Negative answers are cached this long (the SOA minimum).
const NEGATIVE_TTL: u32 = 60;
/// The largest UDP answer sent to a client that offers more (EDNS), the
/// size DNS Flag Day 2020 agreed on to avoid IP fragmentation.
const MAX_UDP_PAYLOAD: u16 = 1232;
/// A TCP client that sends no query for this long is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// What the zone serves, from `edge.toml`.
#[derive(Debug, Clone)]
pub struct ZoneSettings {
    /// The zone, canonical (lower case, no trailing dot).
    pub domain: String,
    /// The edge's public addresses: the apex and every name under it.
    pub public_ips: Vec<IpAddr>,
    /// The zone's name servers (NS). Names inside the zone resolve to
    /// `public_ips`; the parent zone needs glue records for them.
    pub nameservers: Vec<String>,
    /// The SOA's responsible mailbox, as a DNS name (`hostmaster.<zone>`).
    pub hostmaster: String,
    /// TTL of the address, NS and CAA records.
    pub ttl: u32,
    /// CAs allowed to issue for the zone (CAA `issue` and `issuewild`);
    /// empty publishes no CAA.
    pub caa_issuers: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("[dns] {0:?} is not a DNS name")]
    Name(String),
    #[error("[dns] public_ips is empty: the zone would have no addresses")]
    NoAddresses,
}

/// The `_acme-challenge` TXT values, shared between the ACME client that
/// sets them and the DNS server that serves them. Queries copy an `Arc`
/// under a lock held for nanoseconds, so no query load delays an update.
#[derive(Debug, Clone, Default)]
pub struct Challenges(Arc<RwLock<Arc<Vec<String>>>>);

impl Challenges {
    /// Publishes one more value; an order for the apex and the wildcard
    /// needs two at once.
    pub fn add(&self, value: &str) {
        self.update(|values| {
            if !values.iter().any(|v| v == value) {
                values.push(value.to_owned());
            }
        });
    }

    pub fn remove(&self, value: &str) {
        self.update(|values| values.retain(|v| v != value));
    }

    /// Publishes exactly `values`: a cluster edge answers the values its
    /// store holds, whichever edge's order put them there.
    pub fn replace(&self, values: impl IntoIterator<Item = String>) {
        let mut fresh: Vec<String> = values.into_iter().collect();
        fresh.sort();
        fresh.dedup();
        self.update(|values| *values = fresh);
    }

    pub fn values(&self) -> Arc<Vec<String>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn update(&self, change: impl FnOnce(&mut Vec<String>)) {
        let mut current = self.0.write().unwrap_or_else(|e| e.into_inner());
        let mut values = Vec::clone(&current);
        change(&mut values);
        *current = Arc::new(values);
    }
}

/// What a query gets: a response code, whether the answer is authoritative,
/// and the answer and authority sections.
#[derive(Debug)]
pub struct Answer {
    pub code: ResponseCode,
    pub authoritative: bool,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
}

/// Decides every answer of the zone.
pub struct ZoneAnswers {
    origin: LowerName,
    challenge: LowerName,
    /// In-zone names of the name servers, answered like the apex.
    nameserver_names: Vec<LowerName>,
    ttl: u32,
    /// The configured public addresses...
    configured: Vec<IpAddr>,
    /// ...and those answered now: in a cluster, every live edge's.
    addresses: std::sync::RwLock<Arc<Vec<IpAddr>>>,
    soa: Record,
    ns: Vec<Record>,
    caa: Vec<Record>,
    challenges: Challenges,
}

impl ZoneAnswers {
    pub fn new(zone: &ZoneSettings, challenges: Challenges) -> Result<Self, ZoneError> {
        let name = |s: &str| {
            Name::from_ascii(s)
                .map(|mut n| {
                    n.set_fqdn(true);
                    n
                })
                .map_err(|_| ZoneError::Name(s.to_owned()))
        };
        if zone.public_ips.is_empty() {
            return Err(ZoneError::NoAddresses);
        }
        let origin = name(&zone.domain)?;
        let nameservers = zone
            .nameservers
            .iter()
            .map(|ns| name(ns))
            .collect::<Result<Vec<_>, _>>()?;
        let primary = nameservers
            .first()
            .cloned()
            .unwrap_or_else(|| origin.clone());
        // The serial changes with every start, so secondaries (if any) see
        // a changed configuration.
        let serial = u32::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1),
        )
        .unwrap_or(1);
        let soa = Record::from_rdata(
            origin.clone(),
            zone.ttl,
            RData::SOA(SOA::new(
                primary,
                name(&zone.hostmaster)?,
                serial,
                3600,
                600,
                604_800,
                NEGATIVE_TTL,
            )),
        );
        let ns = nameservers
            .iter()
            .map(|n| Record::from_rdata(origin.clone(), zone.ttl, RData::NS(NS(n.clone()))))
            .collect();
        let mut caa = Vec::new();
        for issuer in &zone.caa_issuers {
            // An issuer is written without the root's dot (RFC 8659).
            let mut issuer_name = Name::from_ascii(issuer.trim_end_matches('.'))
                .map_err(|_| ZoneError::Name(issuer.clone()))?;
            issuer_name.set_fqdn(false);
            caa.push(Record::from_rdata(
                origin.clone(),
                zone.ttl,
                RData::CAA(CAA::new_issue(false, Some(issuer_name.clone()), vec![])),
            ));
            caa.push(Record::from_rdata(
                origin.clone(),
                zone.ttl,
                RData::CAA(CAA::new_issuewild(false, Some(issuer_name), vec![])),
            ));
        }
        let challenge = origin
            .prepend_label("_acme-challenge")
            .map_err(|_| ZoneError::Name(zone.domain.clone()))?;
        Ok(Self {
            origin: LowerName::new(&origin),
            challenge: LowerName::new(&challenge),
            nameserver_names: nameservers
                .iter()
                .map(LowerName::new)
                .filter(|n| LowerName::new(&origin).zone_of(n))
                .collect(),
            ttl: zone.ttl,
            configured: zone.public_ips.clone(),
            addresses: std::sync::RwLock::new(Arc::new(zone.public_ips.clone())),
            soa,
            ns,
            caa,
            challenges,
        })
    }

    /// The answer to one question.
    pub fn answer(&self, qname: &LowerName, qtype: RecordType, qclass: DNSClass) -> Answer {
        // Zone transfers are refused too: the zone is computed (a
        // cluster's edges share it through etcd, not through transfers).
        let transfer = matches!(qtype, RecordType::AXFR | RecordType::IXFR);
        if qclass != DNSClass::IN || !self.origin.zone_of(qname) || transfer {
            return Answer {
                code: ResponseCode::Refused,
                authoritative: false,
                answers: vec![],
                authority: vec![],
            };
        }
        let owner = Name::from(qname.clone());
        let answers = if *qname == self.origin {
            match qtype {
                // RFC 8482: one RRset answers ANY.
                RecordType::SOA | RecordType::ANY => vec![self.soa.clone()],
                RecordType::NS => self.ns.clone(),
                RecordType::CAA => self.caa.clone(),
                RecordType::A | RecordType::AAAA => self.addresses(&owner, qtype),
                _ => vec![],
            }
        } else if *qname == self.challenge {
            match qtype {
                RecordType::TXT | RecordType::ANY => self
                    .challenges
                    .values()
                    .iter()
                    .map(|v| {
                        Record::from_rdata(
                            owner.clone(),
                            CHALLENGE_TTL,
                            RData::TXT(TXT::new(vec![v.clone()])),
                        )
                    })
                    .collect(),
                _ => vec![],
            }
        } else if self.is_host(qname) {
            match qtype {
                RecordType::A | RecordType::AAAA | RecordType::ANY => self.addresses(&owner, qtype),
                _ => vec![],
            }
        } else {
            return self.negative(ResponseCode::NXDomain);
        };
        if answers.is_empty() {
            return self.negative(ResponseCode::NoError);
        }
        Answer {
            code: ResponseCode::NoError,
            authoritative: true,
            answers,
            authority: vec![],
        }
    }

    /// Preview names (one valid label under the zone), the wildcard itself
    /// and the zone's own name servers have the edge's addresses; nothing
    /// else exists.
    fn is_host(&self, qname: &LowerName) -> bool {
        if self.nameserver_names.contains(qname) {
            return true;
        }
        // hickory does not count a leading `*` label.
        if qname.is_wildcard() {
            return qname.num_labels() == self.origin.num_labels();
        }
        if qname.num_labels() != self.origin.num_labels() + 1 {
            return false;
        }
        let name = Name::from(qname.clone());
        name.iter()
            .next()
            .and_then(|label| std::str::from_utf8(label).ok())
            .is_some_and(|label| calvin_proto::PreviewName::parse(label).is_ok())
    }

    /// Answers `addresses` from now on (the cluster's live edges'); the
    /// configured ones while it is empty.
    pub fn set_addresses(&self, addresses: Vec<IpAddr>) {
        let addresses = if addresses.is_empty() {
            self.configured.clone()
        } else {
            addresses
        };
        *self.addresses.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(addresses);
    }

    fn addresses(&self, owner: &Name, qtype: RecordType) -> Vec<Record> {
        let addresses = self
            .addresses
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        addresses
            .iter()
            .filter_map(|ip| match (ip, qtype) {
                (IpAddr::V4(v4), RecordType::A | RecordType::ANY) => Some(RData::A(A(*v4))),
                (IpAddr::V6(v6), RecordType::AAAA | RecordType::ANY) => {
                    Some(RData::AAAA(AAAA(*v6)))
                }
                _ => None,
            })
            .map(|rdata| Record::from_rdata(owner.clone(), self.ttl, rdata))
            .collect()
    }

    /// NXDOMAIN or NODATA: no answer, the SOA in the authority section.
    fn negative(&self, code: ResponseCode) -> Answer {
        Answer {
            code,
            authoritative: true,
            answers: vec![],
            authority: vec![self.soa.clone()],
        }
    }
}

/// hickory's request handler over [`ZoneAnswers`], counting its answers.
struct Handler(Arc<ZoneAnswers>, Counts);

/// A response code's name in [`crate::counts::DNS_ANSWERS`].
fn answer_name(code: ResponseCode) -> &'static str {
    match code {
        ResponseCode::NoError => "noerror",
        ResponseCode::NXDomain => "nxdomain",
        ResponseCode::Refused => "refused",
        ResponseCode::FormErr => "formerr",
        ResponseCode::NotImp => "notimp",
        _ => "other",
    }
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let info = request.request_info();
        // A request that gets no answer records, and why.
        let refusal = if request.metadata.message_type != MessageType::Query {
            Some(ResponseCode::FormErr)
        } else if request.metadata.op_code != OpCode::Query {
            Some(ResponseCode::NotImp)
        } else if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            Some(ResponseCode::BADVERS)
        } else if info.is_err() {
            Some(ResponseCode::FormErr)
        } else {
            None
        };
        let edns = request.edns.as_ref().map(|asked| {
            let mut ours = Edns::new();
            ours.set_max_payload(asked.max_payload().clamp(512, MAX_UDP_PAYLOAD));
            ours.set_version(0);
            if refusal == Some(ResponseCode::BADVERS) {
                ours.set_rcode_high(ResponseCode::BADVERS.high());
            }
            ours
        });
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let builder = MessageResponseBuilder::new(&request.queries, edns.as_ref());
        let result = match (refusal, info) {
            (None, Ok(info)) => {
                let query = info.query;
                let answer = self
                    .0
                    .answer(query.name(), query.query_type(), query.query_class());
                debug!(
                    src = %info.src,
                    name = %query.name(),
                    qtype = %query.query_type(),
                    code = %answer.code,
                    "dns"
                );
                metadata.response_code = answer.code;
                metadata.authoritative = answer.authoritative;
                self.1.dns_answered(answer_name(answer.code));
                response_handle
                    .send_response(builder.build(
                        metadata,
                        answer.answers.iter(),
                        answer.authority.iter(),
                        std::iter::empty(),
                        std::iter::empty(),
                    ))
                    .await
            }
            // `refusal` is set whenever the question cannot be read.
            (refusal, _) => {
                let code = refusal.unwrap_or(ResponseCode::FormErr);
                metadata.response_code = code;
                self.1.dns_answered(answer_name(code));
                debug!(src = %request.src(), %code, "dns request refused");
                response_handle
                    .send_response(builder.build_no_records(metadata))
                    .await
            }
        };
        match result {
            Ok(info) => info,
            Err(err) => {
                warn!(%err, "cannot send a DNS answer");
                let mut failed = Metadata::response_from_request(&request.metadata);
                failed.response_code = ResponseCode::ServFail;
                ResponseInfo::from(hickory_proto::op::Header {
                    metadata: failed,
                    counts: Default::default(),
                })
            }
        }
    }
}

/// The DNS listener: UDP and TCP on the same address.
pub struct DnsServer {
    server: Server<Handler>,
    addr: SocketAddr,
    answers: Arc<ZoneAnswers>,
}

impl DnsServer {
    /// Binds UDP and TCP on `addr` (port 0 picks one port free for both)
    /// and starts answering.
    pub async fn bind(
        addr: SocketAddr,
        answers: ZoneAnswers,
        counts: Counts,
    ) -> std::io::Result<DnsServer> {
        let (udp, tcp) = bind_pair(addr).await?;
        let addr = udp.local_addr()?;
        let answers = Arc::new(answers);
        let mut server = Server::new(Handler(answers.clone(), counts));
        server.register_socket(udp);
        server.register_listener(tcp, TCP_IDLE, 64);
        Ok(DnsServer {
            server,
            addr,
            answers,
        })
    }

    /// Answers the addresses `addresses` says from now on, as it changes
    /// (a cluster's live edges).
    pub fn follow_addresses(&self, mut addresses: tokio::sync::watch::Receiver<Vec<IpAddr>>) {
        let answers = Arc::downgrade(&self.answers);
        tokio::spawn(async move {
            loop {
                let now = addresses.borrow_and_update().clone();
                match answers.upgrade() {
                    Some(answers) => answers.set_addresses(now),
                    None => return,
                }
                if addresses.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub async fn shutdown(mut self) {
        if let Err(err) = self.server.shutdown_gracefully().await {
            debug!(%err, "DNS server stopped");
        }
    }
}

/// A UDP socket and a TCP listener on the same address. With port 0, tries
/// a few ports the kernel picks for UDP until TCP's twin is free too.
async fn bind_pair(addr: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
    let mut last_error = None;
    for _ in 0..if addr.port() == 0 { 16 } else { 1 } {
        let udp = UdpSocket::bind(addr).await?;
        match TcpListener::bind(udp.local_addr()?).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(err) => last_error = Some(err),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("no port free for UDP and TCP")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone() -> ZoneAnswers {
        let challenges = Challenges::default();
        ZoneAnswers::new(
            &ZoneSettings {
                domain: "preview.example.com".into(),
                public_ips: vec![
                    "203.0.113.7".parse().unwrap(),
                    "2001:db8::7".parse().unwrap(),
                ],
                nameservers: vec!["ns1.preview.example.com".into(), "ns.other.net".into()],
                hostmaster: "hostmaster.preview.example.com".into(),
                ttl: 300,
                caa_issuers: vec!["letsencrypt.org".into()],
            },
            challenges,
        )
        .unwrap()
    }

    fn ask(zone: &ZoneAnswers, name: &str, qtype: RecordType) -> Answer {
        let name = LowerName::new(&Name::from_ascii(name).unwrap());
        zone.answer(&name, qtype, DNSClass::IN)
    }

    fn data(answer: &Answer) -> Vec<String> {
        answer.answers.iter().map(|r| r.data.to_string()).collect()
    }

    #[test]
    fn previews_and_the_apex_have_the_public_addresses() {
        let zone = zone();
        for name in [
            "preview.example.com.",
            "brisk-otter-7k2qx9.preview.example.com.",
        ] {
            let a = ask(&zone, name, RecordType::A);
            assert_eq!(a.code, ResponseCode::NoError);
            assert!(a.authoritative);
            assert_eq!(data(&a), ["203.0.113.7"]);
            assert_eq!(a.answers[0].name.to_string(), name);
            assert_eq!(data(&ask(&zone, name, RecordType::AAAA)), ["2001:db8::7"]);
        }
        assert_eq!(
            data(&ask(&zone, "NS1.Preview.Example.COM.", RecordType::A)),
            ["203.0.113.7"]
        );
    }

    #[test]
    fn any_gets_both_families_and_transfers_are_refused() {
        let zone = zone();
        let any = ask(&zone, "web.preview.example.com.", RecordType::ANY);
        assert_eq!(data(&any), ["203.0.113.7", "2001:db8::7"]);
        let literal = ask(&zone, "*.preview.example.com.", RecordType::A);
        assert_eq!(data(&literal), ["203.0.113.7"]);
        for qtype in [RecordType::AXFR, RecordType::IXFR] {
            let t = ask(&zone, "preview.example.com.", qtype);
            assert_eq!(t.code, ResponseCode::Refused, "{qtype}");
        }
    }

    #[test]
    fn types_a_name_lacks_are_nodata_not_nxdomain() {
        let zone = zone();
        let mx = ask(&zone, "web.preview.example.com.", RecordType::MX);
        assert_eq!(mx.code, ResponseCode::NoError);
        assert!(mx.answers.is_empty());
        assert_eq!(mx.authority[0].record_type(), RecordType::SOA);
        let txt = ask(
            &zone,
            "_acme-challenge.preview.example.com.",
            RecordType::TXT,
        );
        assert_eq!(txt.code, ResponseCode::NoError);
        assert!(txt.answers.is_empty());
    }

    #[test]
    fn names_that_are_not_previews_do_not_exist() {
        let zone = zone();
        for name in [
            "a.b.preview.example.com.",
            "_x.preview.example.com.",
            "x._acme-challenge.preview.example.com.",
            "we_b.preview.example.com.",
        ] {
            let a = ask(&zone, name, RecordType::A);
            assert_eq!(a.code, ResponseCode::NXDomain, "{name}");
            assert_eq!(a.authority.len(), 1);
        }
    }

    #[test]
    fn out_of_zone_is_refused() {
        let zone = zone();
        for name in [
            "example.com.",
            "preview.example.com.evil.net.",
            "ns.other.net.",
        ] {
            let a = ask(&zone, name, RecordType::A);
            assert_eq!(a.code, ResponseCode::Refused, "{name}");
            assert!(!a.authoritative);
        }
        let name = LowerName::new(&Name::from_ascii("preview.example.com.").unwrap());
        let chaos = zone.answer(&name, RecordType::TXT, DNSClass::CH);
        assert_eq!(chaos.code, ResponseCode::Refused);
    }

    #[test]
    fn apex_has_soa_ns_and_caa() {
        let zone = zone();
        let soa = ask(&zone, "preview.example.com.", RecordType::SOA);
        assert!(
            data(&soa)[0].starts_with("ns1.preview.example.com. hostmaster.preview.example.com."),
            "{:?}",
            data(&soa)
        );
        assert_eq!(
            data(&ask(&zone, "preview.example.com.", RecordType::NS)),
            ["ns1.preview.example.com.", "ns.other.net."]
        );
        let caa = data(&ask(&zone, "preview.example.com.", RecordType::CAA));
        assert_eq!(caa.len(), 2, "{caa:?}");
        assert!(caa[0].contains("issue") && caa[0].contains("letsencrypt.org"));
        assert!(caa[1].contains("issuewild"));
    }

    #[test]
    fn challenge_values_come_and_go() {
        let challenges = Challenges::default();
        let zone = ZoneAnswers::new(
            &ZoneSettings {
                domain: "p.test".into(),
                public_ips: vec!["127.0.0.1".parse().unwrap()],
                nameservers: vec!["ns.p.test".into()],
                hostmaster: "hostmaster.p.test".into(),
                ttl: 60,
                caa_issuers: vec![],
            },
            challenges.clone(),
        )
        .unwrap();
        challenges.add("one");
        challenges.add("two");
        challenges.add("one");
        let txt = ask(&zone, "_acme-challenge.p.test.", RecordType::TXT);
        assert_eq!(data(&txt), ["one", "two"]);
        assert_eq!(txt.answers[0].ttl, CHALLENGE_TTL);
        challenges.remove("one");
        assert_eq!(
            data(&ask(&zone, "_acme-challenge.p.test.", RecordType::TXT)),
            ["two"]
        );
        assert!(ask(&zone, "p.test.", RecordType::CAA).answers.is_empty());
    }

    #[test]
    fn replaced_challenge_values_are_exactly_the_new_set() {
        let challenges = Challenges::default();
        challenges.add("mine");
        challenges.replace(["b".to_owned(), "a".to_owned(), "b".to_owned()]);
        assert_eq!(*challenges.values(), ["a", "b"]);
        challenges.replace([]);
        assert!(challenges.values().is_empty());
    }
}
