//! The exporter itself: one handle, one reading of the table per scrape,
//! answered over HTTP one request at a time.

use ipvsctl::Handle;
use ipvsctl::conns::ConnTable;

use crate::metrics::{self, BackendLabels, Format};
use crate::read;

/// What serves the scrapes: the handle of the namespace read, its totals'
/// file, the labels of the real-server series and the metrics' path.
pub struct Exporter {
    pub handle: Handle,
    pub table: ConnTable,
    pub labels: BackendLabels,
    pub path: String,
}

const LANDING: &str = "<html><head><title>IPVS Exporter</title></head><body>\
<h1>IPVS Exporter</h1><p><a href=\"PATH\">Metrics</a></p></body></html>\n";

impl Exporter {
    /// The exporter of `handle`'s namespace.
    pub fn new(handle: Handle, labels: BackendLabels, path: String) -> Exporter {
        let table = ConnTable::new().netns(handle.netns().clone());
        Exporter {
            handle,
            table,
            labels,
            path,
        }
    }

    /// One scrape, in `format`. A failed reading is logged and exposed as
    /// `ipvs_scrape_success 0`.
    pub fn scrape(&self, format: Format) -> String {
        let (snapshot, outcome, failure) = read::read(&self.handle, &self.table);
        if let Some(why) = failure {
            eprintln!("ipvs-exporter: scrape failed: {why}");
        }
        let mut out = String::with_capacity(64 * 1024);
        metrics::render(snapshot, &self.labels, outcome, format, &mut out);
        out
    }

    /// Answers `server`'s requests until it is closed: the metrics at the
    /// path (in the format the `Accept` header asks for), a landing page
    /// at `/`, 404 elsewhere.
    pub fn serve(&self, server: &tiny_http::Server) {
        let header = |name: &str, value: &str| {
            tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes())
                .expect("a valid header")
        };
        for request in server.incoming_requests() {
            let path = request.url().split('?').next().unwrap_or("").to_owned();
            let response = if path == self.path {
                let accept = request
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Accept"))
                    .map(|h| h.value.as_str().to_owned());
                let format = Format::from_accept(accept.as_deref());
                tiny_http::Response::from_string(self.scrape(format))
                    .with_header(header("Content-Type", format.content_type()))
            } else if path == "/" {
                tiny_http::Response::from_string(LANDING.replace("PATH", &self.path))
                    .with_header(header("Content-Type", "text/html; charset=utf-8"))
            } else {
                tiny_http::Response::from_string("404 page not found\n").with_status_code(404)
            };
            // A client that went away is not the exporter's failure.
            let _ = request.respond(response);
        }
    }
}
