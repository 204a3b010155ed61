//! probe
use crate::support::*;
use hickory_proto::op::OpCode;
use hickory_proto::rr::{DNSClass, RecordType};

#[tokio::test]
async fn probe() {
    let s = start(&fixture("conformance"), Options::conformance()).await;
    let mut qs = vec![];
    qs.push(q("clusterset.local.", RecordType::AXFR));
    qs.push(q("clusterset.local.", RecordType::IXFR));
    let mut x = q("web-east.prod.svc.clusterset.local.", RecordType::A);
    x.opcode = OpCode::Notify;
    qs.push(x);
    let mut x = q("web-east.prod.svc.clusterset.local.", RecordType::A);
    x.opcode = OpCode::Update;
    qs.push(x);
    let mut x = q("version.bind.", RecordType::TXT);
    x.class = DNSClass::CH;
    qs.push(x);
    let mut x = q("web-east.prod.svc.clusterset.local.", RecordType::A);
    x.edns_version = 1;
    qs.push(x);
    let mut x = q("big-north.prod.svc.clusterset.local.", RecordType::A);
    x.edns = None;
    qs.push(x);
    qs.push(q(
        "_http._tcp.mid-north.prod.svc.clusterset.local.",
        RecordType::SRV,
    ));
    qs.push(q("clusterset.local.", RecordType::ANY));
    for proto in [Proto::Udp, Proto::Tcp] {
        for x in &qs {
            let (m, b) = ask(s.dns, proto, x).await;
            println!(
                "{proto:?} {} {}: {:?} aa={} tc={} len={} q={}",
                x.name,
                x.rtype,
                m.metadata.response_code,
                m.metadata.authoritative,
                m.metadata.truncation,
                b.len(),
                m.queries.len()
            );
            for r in m.all_sections() {
                println!("  {}", text(r));
            }
            println!("  edns {:?}", m.edns);
        }
    }
}
