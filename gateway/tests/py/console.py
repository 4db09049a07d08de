#!/usr/bin/env python3
"""An operator at the console: Debian's headless Chromium driven over WebDriver (selenium and
Debian's chromedriver), clicking the page the gateway serves at `GET /` as a person would. It
shares no code with the gateway: it reads only what the page puts on the screen.

Usage: console.py   (commands on stdin, one JSON answer per line on stdout)
  open URL TOKEN          load the page, type the credential, wait for the live event stream;
                          answers the title, the page's protocol and whether it is a secure
                          context
  page                    the title and the address of what the browser shows
  wait_phase KEY PHASES S wait up to S seconds for the row of KEY (response/component) to show
                          one of PHASES (comma-separated); answers its phase, digest and reason
                          as shown
  approve KEY             click the row's Approve and wait for the gateway's answer
  revoke KEY              click the row's Revoke and wait for the gateway's answer
  click ID                click the button with id ID (act-hold, act-release, act-land)
  click_only ID           click it without waiting for an answer; answers the button's text
  caption RESPONSE        the caption of RESPONSE's table
  log                     the lines of the decisions and events log, newest first
  text ID                 the text of the element with id ID
  seen                    every phase each row showed since `open`, in order
  plan                    the marks of the plan view (kind and target; a circle's centre and a
                          line's points, in the picture's pixels)
  sources                 the AoI bars (source, stale, label, by: the sender shown)
  register FILE WHO       open "Register a contract", paste FILE's JSON, approved by WHO, submit,
                          and wait for the gateway's answer
  reauthorize GOAL        type GOAL into the contract panel's Reauthorize and submit
  contract                the contract panel's text
  fits W H                resize the window to W x H pixels (a tablet: 768 1024) and answer
                          whether the page fits its width (no sideways scrolling)
  shot FILE               a screenshot of the whole page
  quit
An answer is {"ok": true, ...} or {"ok": false, "error": "..."}.
"""
import json
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# Records every phase a row shows, as the page changes it (installed from outside the page).
WATCH = """
window.__seen = {};
const note = () => {
  for (const r of document.querySelectorAll('tr[data-component]')) {
    const k = r.dataset.component, p = r.dataset.phase, s = window.__seen[k] || (window.__seen[k] = []);
    if (s[s.length - 1] !== p) s.push(p);
  }
};
new MutationObserver(note).observe(document.getElementById('responses'), {subtree: true, childList: true, attributes: true});
note();
"""

# The page re-draws its panels as it learns; each read takes one snapshot of what is shown.
ROW = """
const r = document.querySelector('tr[data-component="' + arguments[0] + '"]');
if (!r) return null;
const c = r.querySelectorAll('td');
return {phase: r.dataset.phase, reason: c[3].textContent, certificate: c[4].textContent, digest: c[5].textContent};
"""
PLAN = """
return [...document.querySelectorAll('#plan [data-kind]')].map(m => ({kind: m.dataset.kind, target: m.dataset.target || null,
  at: m.tagName === 'circle' ? [+m.getAttribute('cx'), +m.getAttribute('cy')] : null,
  points: m.tagName === 'polyline' ? m.getAttribute('points').trim().split(/\\s+/).map(p => p.split(',').map(Number)) : null}));
"""
SOURCES = """
return [...document.querySelectorAll('#sources .bar')].map(b => ({source: b.dataset.source,
  stale: b.dataset.stale === 'true', label: b.querySelector('.age').textContent,
  by: (b.querySelector('.by') || {}).textContent || null}));
"""


def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--window-size=1280,1100", "--force-prefers-reduced-motion"]:
        o.add_argument(a)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)


def wait(d, what, cond, secs):
    end = time.time() + secs
    while time.time() < end:
        try:
            v = cond()
            if v:
                return v
        except WebDriverException:
            pass
        time.sleep(0.1)
    try:
        logs = [e["message"] for e in d.get_log("browser")][-8:]
    except WebDriverException:
        logs = []
    raise TimeoutError(f"timed out after {secs} s waiting for {what}; the page's console: {logs}")


def answer(d, before):
    """The gateway's answer the page shows after a click (the #answer box changes)."""
    def changed():
        a = d.find_element(By.ID, "answer")
        t = a.text
        return a.is_displayed() and t != before and {"code": a.get_attribute("data-code"), "text": t}
    return wait(d, "the gateway's answer on the page", changed, 10)


def click(d, sel):
    """Clicks the element `sel` names once it is on the page; False (try again) while it is not
    or was just re-drawn."""
    found = d.find_elements(By.CSS_SELECTOR, sel)
    if not found:
        return False
    found[0].click()
    return True


def run():
    d = browser()
    try:
        for line in sys.stdin:
            parts = line.split()
            if not parts:
                continue
            cmd, args = parts[0], parts[1:]
            try:
                if cmd == "quit":
                    print(json.dumps({"ok": True}), flush=True)
                    return
                out = step(d, cmd, args)
                print(json.dumps({"ok": True, **out}), flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is an answer, never a hang
                print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
    finally:
        d.quit()


def step(d, cmd, args):
    if cmd == "open":
        url, token = args
        d.get(url)
        wait(d, "the page", lambda: d.find_element(By.ID, "token"), 10)
        d.find_element(By.ID, "token").send_keys(token)
        d.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
        wait(d, "the live event stream", lambda: d.find_element(By.ID, "stream").get_attribute("data-state") == "live", 10)
        wait(d, "the status", lambda: d.find_element(By.ID, "vehicle-mode").text not in ("", "–"), 10)
        d.execute_script(WATCH)
        return {"title": d.title, "url_has_token": token in d.current_url,
                "protocol": d.execute_script("return location.protocol"),
                "secure_context": d.execute_script("return window.isSecureContext")}
    if cmd == "page":
        return {"title": d.title, "url": d.current_url}
    if cmd == "wait_phase":
        key, phases, secs = args[0], args[1].split(","), float(args[2])
        row = wait(d, f"{key} {args[1]}", lambda: (lambda r: r if r and r["phase"] in phases else None)(
            d.execute_script(ROW, key)), secs)
        return row
    if cmd in ("approve", "revoke"):
        key = args[0]
        before = d.find_element(By.ID, "answer").text
        sel = f'button[data-act="{cmd}"][data-component="{key}"]'
        wait(d, f"{cmd} on {key}", lambda: click(d, sel), 10)
        return answer(d, before)
    if cmd == "click":
        before = d.find_element(By.ID, "answer").text
        d.find_element(By.ID, args[0]).click()
        return answer(d, before)
    if cmd == "click_only":
        d.find_element(By.ID, args[0]).click()
        return {"text": d.find_element(By.ID, args[0]).text}
    if cmd == "caption":
        sel = f'table[data-response="{args[0]}"] caption'
        return {"text": wait(d, f"the table of {args[0]}", lambda: d.find_element(By.CSS_SELECTOR, sel).text, 10)}
    if cmd == "log":
        return {"lines": [li.text for li in d.find_elements(By.CSS_SELECTOR, "#log li")]}
    if cmd == "text":
        return {"text": d.find_element(By.ID, args[0]).text}
    if cmd == "seen":
        return {"seen": d.execute_script("return window.__seen || {}")}
    if cmd == "plan":
        return {"marks": d.execute_script(PLAN)}
    if cmd == "sources":
        return {"sources": d.execute_script(SOURCES)}
    if cmd == "register":
        before = d.find_element(By.ID, "answer").text
        if d.find_element(By.CSS_SELECTOR, "#contract-panel details").get_attribute("open") is None:
            d.find_element(By.CSS_SELECTOR, "#contract-panel details summary").click()
        with open(args[0], encoding="utf-8") as f:
            d.execute_script("document.getElementById('contract-json').value = arguments[0]", f.read())
        who = d.find_element(By.ID, "approved-by")
        who.clear()
        who.send_keys(args[1])
        d.find_element(By.CSS_SELECTOR, "#register button[type=submit]").click()
        return answer(d, before)
    if cmd == "reauthorize":
        before = d.find_element(By.ID, "answer").text
        d.find_element(By.ID, "reauth-goal").send_keys(args[0])
        d.find_element(By.CSS_SELECTOR, "#reauthorize button[type=submit]").click()
        return answer(d, before)
    if cmd == "contract":
        return {"text": d.execute_script("return document.getElementById('contract').innerText")}
    if cmd == "fits":
        d.set_window_size(int(args[0]), int(args[1]))
        time.sleep(0.7)
        wide, view = d.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        return {"fits": wide <= view, "scroll_width": wide, "client_width": view}
    if cmd == "shot":
        d.save_screenshot(args[0])
        return {"file": args[0]}
    raise ValueError(f"unknown command {cmd}")


if __name__ == "__main__":
    run()
