//! The app's files, embedded in the binary: one page, its script and its style sheet, written
//! by hand with no framework so the console stays small and loads at once.

use bytes::Bytes;

use crate::Reply;

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/style.css");
const ICON: &str = include_str!("../assets/favicon.svg");

/// The file at `path`; the app's page for the console's root (it routes by the URL's
/// fragment, so every page is the one document).
pub(crate) fn answer(path: &str) -> Reply {
    let file = match path {
        "/" | "/console" | "/console/" | "/console/index.html" => {
            Some(("text/html; charset=utf-8", INDEX))
        }
        "/console/app.js" => Some(("text/javascript; charset=utf-8", SCRIPT)),
        "/console/style.css" => Some(("text/css; charset=utf-8", STYLE)),
        "/console/favicon.svg" => Some(("image/svg+xml", ICON)),
        _ => None,
    };
    let (status, content_type, body) = match file {
        Some((content_type, body)) => (200, content_type, body),
        None => (404, "text/plain; charset=utf-8", "not found\n"),
    };
    Reply {
        status,
        content_type,
        body: Bytes::from_static(body.as_bytes()),
        set_cookie: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_the_files_that_are_served() {
        let page = answer("/").body;
        let page = std::str::from_utf8(&page).unwrap();
        for file in [
            "/console/app.js",
            "/console/style.css",
            "/console/favicon.svg",
        ] {
            assert!(page.contains(file), "the page does not load {file}");
            assert_eq!(answer(file).status, 200);
        }
        assert_eq!(answer("/console/missing.js").status, 404);
    }
}
