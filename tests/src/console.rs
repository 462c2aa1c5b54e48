//! The owner's side in a real browser: a Chromium of its own, driven through its own WebDriver
//! session as a person uses the console (press what a person presses, read what a person reads),
//! with a screenshot saved at each step under `target/console-screenshots/<test>/`.

use std::path::PathBuf;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

/// How long a person waits for the console to show something.
pub const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Owner {
    pub client: Client,
    driver: tokio::process::Child,
    driver_pid: u32,
    profile: PathBuf,
    shots: PathBuf,
    step: u32,
}

impl Drop for Owner {
    fn drop(&mut self) {
        // chromedriver leads its own process group, which holds the Chromium it started.
        if self.driver.try_wait().ok().flatten().is_none() {
            browser_runtime::browser::kill_group(self.driver_pid);
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Where this test run keeps its screenshots: beside the build, kept after the run.
fn screenshots(test: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let target = exe.parent().and_then(|deps| deps.parent()).and_then(|p| p.parent()).expect("target/");
    target.join("console-screenshots").join(test)
}

/// How the owner's browser is set up beyond its width.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The browser's time zone (`TZ`), such as `Asia/Kolkata`; the machine's when `None`.
    pub time_zone: Option<&'static str>,
    /// The console's pages may show notifications (the owner said yes once, in this profile).
    pub notifications: bool,
}

/// A WebDriver command fantoccini does not wrap: GET of an element's `what`, such as its
/// `computedlabel` or `computedrole` (the browser's accessibility tree's name and role).
#[derive(Debug)]
struct ElementGet {
    element: String,
    what: &'static str,
}

impl fantoccini::wd::WebDriverCompatibleCommand for ElementGet {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/element/{}/{}", session.unwrap_or_default(), self.element, self.what))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::GET, None)
    }
}

/// Chromium's network conditions: the browser offline, or back.
#[derive(Debug)]
struct Network {
    offline: bool,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Network {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/chromium/network_conditions", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        let conditions = json!({ "network_conditions": { "offline": self.offline, "latency": 0, "download_throughput": -1, "upload_throughput": -1 } });
        (http::Method::POST, Some(conditions.to_string()))
    }
}

/// The accessible name (`computedlabel`) or role (`computedrole`) the browser gives `e`.
pub async fn computed(client: &Client, e: &fantoccini::elements::Element, what: &'static str) -> String {
    let got = client.issue_cmd(ElementGet { element: e.element_id().to_string(), what }).await;
    got.ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

impl Owner {
    /// A Chromium for the owner, `width` CSS pixels wide; screenshots go under `test`'s name.
    pub async fn start(test: &str, width: u32) -> Self {
        Self::start_with(test, width, Setup::default()).await
    }

    /// [`Owner::start`], the browser set up as `setup` says.
    pub async fn start_with(test: &str, width: u32, setup: Setup) -> Self {
        crate::browser::need_browser();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut driver = tokio::process::Command::new("/usr/bin/chromedriver");
        if let Some(tz) = setup.time_zone {
            driver.env("TZ", tz);
        }
        let driver = driver
            .arg(format!("--port={port}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let driver_pid = driver.id().expect("chromedriver runs");
        crate::poll_until("chromedriver to listen", WAIT, Duration::from_millis(20), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(|_| ())
        })
        .await;
        let profile =
            std::env::temp_dir().join(format!("grant-ledger-owner-{}", hex::encode(rand::random::<[u8; 8]>())));
        let mut args = vec![
            "--headless=new".to_owned(),
            "--disable-gpu".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            format!("--window-size={width},1000"),
            format!("--user-data-dir={}", profile.display()),
        ];
        // As root Chromium runs only without its sandbox.
        if std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t"))) {
            args.push("--no-sandbox".into());
        }
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        let prefs = if setup.notifications {
            json!({ "profile.default_content_setting_values.notifications": 1 })
        } else {
            json!({})
        };
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": "/usr/bin/chromium", "args": args, "prefs": prefs }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("the owner's browser session");
        let shots = screenshots(test);
        let _ = std::fs::remove_dir_all(&shots);
        std::fs::create_dir_all(&shots).expect("the screenshot folder");
        Self { client, driver, driver_pid, profile, shots, step: 0 }
    }

    /// Saves what the owner sees now as the next numbered screenshot.
    pub async fn shot(&mut self, label: &str) {
        self.step += 1;
        let png = self.client.screenshot().await.expect("a screenshot");
        std::fs::write(self.shots.join(format!("{:02}-{label}.png", self.step)), png).expect("the screenshot file");
    }

    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.expect("the page opens");
    }

    /// The text the owner reads in the element `css`, or "" when it is not there.
    pub async fn text(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits until the element `css` reads something that `wanted` accepts; that text.
    pub async fn read_until(&self, css: &str, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let wanted = &wanted;
        crate::poll_until(what, WAIT, Duration::from_millis(100), || async move {
            let t = self.text(css).await;
            wanted(&t).then_some(t)
        })
        .await
    }

    /// Waits until the image `css` has loaded a picture, as the owner would see it; its natural
    /// width and height in pixels.
    pub async fn image_loaded(&self, css: &str, what: &str) -> (u64, u64) {
        crate::poll_until(what, WAIT, Duration::from_millis(100), || async move {
            let js = "const i = document.querySelector(arguments[0]); \
                      return i && i.complete && !i.hidden ? [i.naturalWidth, i.naturalHeight] : null;";
            let v = self.client.execute(js, vec![serde_json::json!(css)]).await.ok()?;
            let size = v.as_array()?;
            let (w, h) = (size.first()?.as_u64()?, size.get(1)?.as_u64()?);
            (w > 0 && h > 0).then_some((w, h))
        })
        .await
    }

    /// Types `text` into the field `css`, as the owner's keys.
    pub async fn type_into(&self, css: &str, text: &str) {
        let field = self.client.find(Locator::Css(css)).await.expect("the field is there");
        field.send_keys(text).await.expect("the field takes the keys");
    }

    /// Clicks the element `css` at (`fx`, `fy`) of its width and height, as a pointer would.
    pub async fn click_at(&self, css: &str, fx: f64, fy: f64) {
        use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
        let element = self.client.find(Locator::Css(css)).await.expect("the element is there");
        let (_, _, w, h) = element.rectangle().await.expect("its box");
        // Offsets from the element's centre, in CSS pixels.
        let (x, y) = ((fx - 0.5) * w, (fy - 0.5) * h);
        let click = MouseActions::new("owner".into())
            .then(PointerAction::MoveToElement { element, duration: None, x, y })
            .then(PointerAction::Down { button: MOUSE_BUTTON_LEFT })
            .then(PointerAction::Up { button: MOUSE_BUTTON_LEFT });
        self.client.perform_actions(click).await.expect("the click is sent");
    }

    /// Presses the button labelled `label` inside the element `css`, once it is there.
    pub async fn press(&self, css: &str, label: &str) {
        let button =
            crate::poll_until(&format!("the button {label:?}"), WAIT, Duration::from_millis(100), || async move {
                let scope = self.client.find(Locator::Css(css)).await.ok()?;
                for b in scope.find_all(Locator::Css("button")).await.ok()? {
                    if b.text().await.ok()?.trim() == label && b.is_enabled().await.unwrap_or(false) {
                        return Some(b);
                    }
                }
                None
            })
            .await;
        button.click().await.expect("the button takes the press");
    }

    /// Takes the owner's browser off the network, or puts it back.
    pub async fn offline(&self, offline: bool) {
        self.client.issue_cmd(Network { offline }).await.expect("the network conditions are set");
    }

    /// The `id` of the element that holds focus.
    pub async fn focused_id(&self) -> String {
        let v = self.client.execute("return document.activeElement ? document.activeElement.id : ''", vec![]).await;
        v.ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
    }

    /// Ends the browser session and its Chromium.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}
