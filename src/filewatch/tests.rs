use super::*;

use std::fs;
use std::os::unix::fs::symlink;
use std::time::Duration;

use tokio::time::timeout;

/// Polls fast so a test takes a fraction of a second.
const POLL: Duration = Duration::from_millis(20);
/// Long enough for a change to be seen on a loaded machine.
const WAIT: Duration = Duration::from_secs(5);
/// Several polls and a debounce: a change would have been seen by then.
const QUIET: Duration = Duration::from_millis(400);

fn quick(paths: Vec<PathBuf>) -> FileWatch {
    FileWatch::new(paths, POLL).debounce(Duration::from_millis(10))
}

async fn seen(w: &mut FileWatch) -> bool {
    timeout(WAIT, w.changed()).await.is_ok()
}

/// No change within [`QUIET`], and the watch did look meanwhile (at least
/// two fingerprints taken): silence because nothing was checked would
/// prove nothing.
async fn quiet(w: &mut FileWatch) -> bool {
    let before = w.looks;
    let silent = timeout(QUIET, w.changed()).await.is_err();
    assert!(
        w.looks >= before + 2,
        "the watch looked {} times while quiet",
        w.looks - before
    );
    silent
}

/// Points `link` in `dir` at `target` in one rename, as the kubelet
/// swaps the `..data` link of a ConfigMap or Secret volume.
fn swap(dir: &Path, link: &str, target: &str) {
    let tmp = dir.join("..data_tmp");
    symlink(target, &tmp).expect("symlink");
    fs::rename(&tmp, dir.join(link)).expect("rename over the link");
}

/// A ConfigMap volume: `config.yaml -> ..data/config.yaml`,
/// `..data -> <version>`.
fn configmap(dir: &Path, version: &str, text: &str) {
    let data = dir.join(version);
    fs::create_dir(&data).expect("mkdir");
    fs::write(data.join("config.yaml"), text).expect("write");
    swap(dir, "..data", version);
    if fs::symlink_metadata(dir.join("config.yaml")).is_err() {
        symlink("..data/config.yaml", dir.join("config.yaml")).expect("symlink");
    }
}

#[tokio::test]
async fn a_change_is_seen_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a.yaml");
    fs::write(&file, "one").expect("write");
    let mut w = quick(vec![file.clone()]);
    w.mark_seen().await;
    assert!(quiet(&mut w).await, "nothing changed yet");
    fs::write(&file, "two").expect("write");
    assert!(seen(&mut w).await, "the change is seen");
    assert!(quiet(&mut w).await, "and only once");
}

#[tokio::test]
async fn the_same_bytes_again_are_not_a_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a.yaml");
    fs::write(&file, "same").expect("write");
    let mut w = quick(vec![file.clone()]);
    assert!(seen(&mut w).await, "the first look is news");
    // A rewrite wakes the watch (notify) and moves the mtime; the bytes
    // compared are the same, so polls and events come to nothing.
    fs::write(&file, "same").expect("rewrite");
    assert!(quiet(&mut w).await, "a rewrite with the same bytes");
}

#[tokio::test]
async fn a_configmap_symlink_swap_is_seen() {
    let dir = tempfile::tempdir().expect("tempdir");
    configmap(dir.path(), "..v1", "ttl: 5\n");
    let file = dir.path().join("config.yaml");
    let mut w = quick(vec![file.clone()]).comparing(Compare::Content);
    w.mark_seen().await;
    configmap(dir.path(), "..v2", "ttl: 30\n");
    assert!(seen(&mut w).await, "the swap is seen");
    assert_eq!(fs::read_to_string(&file).expect("read"), "ttl: 30\n");
    assert!(quiet(&mut w).await, "once");
}

#[tokio::test]
async fn a_link_swapped_above_the_watched_directory_is_seen_by_the_poll() {
    // notify watches `current/`, which is the old directory: only the poll
    // can see that `current` now points elsewhere.
    let dir = tempfile::tempdir().expect("tempdir");
    for (version, text) in [("v1", "old"), ("v2", "new")] {
        fs::create_dir(dir.path().join(version)).expect("mkdir");
        fs::write(dir.path().join(version).join("tls.crt"), text).expect("write");
    }
    swap(dir.path(), "current", "v1");
    let mut w = quick(vec![dir.path().join("current/tls.crt")]);
    w.mark_seen().await;
    swap(dir.path(), "current", "v2");
    assert!(seen(&mut w).await, "the poll sees the swap");
}

#[tokio::test]
async fn a_caller_fingerprint_decides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_owned();
    let names = root.clone();
    // Only the names of the entries count, not their content.
    let compare = Compare::With(Arc::new(move || {
        let mut names: Vec<_> = fs::read_dir(&names)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
            .unwrap_or_default();
        names.sort();
        let mut h = DefaultHasher::new();
        names.hash(&mut h);
        h.finish()
    }));
    let mut w = quick(vec![root.clone()]).comparing(compare);
    w.mark_seen().await;
    fs::write(root.join("a"), "1").expect("write");
    assert!(seen(&mut w).await, "a new entry");
    fs::write(root.join("a"), "2").expect("write");
    assert!(quiet(&mut w).await, "content does not count here");
}

/// One reload as a caller does it: wait for a change, load, offer.
async fn reload(w: &mut FileWatch, kept: &mut Kept<u32>, file: &Path) -> Option<Offer<String>> {
    timeout(WAIT, w.changed()).await.ok()?;
    let loaded = fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|t| t.trim().parse::<u32>().map_err(|e| e.to_string()));
    Some(kept.offer(loaded))
}

#[tokio::test]
async fn a_failing_load_keeps_the_old_data_and_is_reported_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("n");
    fs::write(&file, "1").expect("write");
    let mut w = quick(vec![file.clone()]);
    w.mark_seen().await;
    let mut kept = Kept::new(1);

    fs::write(&file, "x").expect("write");
    let first = reload(&mut w, &mut kept, &file).await;
    assert!(matches!(first, Some(Offer::Failed(_))), "{first:?}");
    assert_eq!(*kept.get(), 1, "the old data stays");
    assert!(kept.failing().is_some());
    assert!(
        quiet(&mut w).await,
        "no reload, so no report, while the file stays"
    );

    // Broken differently, with the same error: not news.
    fs::write(&file, "y").expect("write");
    let again = reload(&mut w, &mut kept, &file).await;
    assert!(matches!(again, Some(Offer::StillFailing(_))), "{again:?}");
    assert_eq!(*kept.get(), 1);

    fs::write(&file, "2").expect("write");
    let fixed = reload(&mut w, &mut kept, &file).await;
    assert!(
        matches!(fixed, Some(Offer::Replaced { recovered: true })),
        "{fixed:?}"
    );
    assert_eq!(*kept.get(), 2);
    assert!(kept.failing().is_none());

    fs::write(&file, "3").expect("write");
    let next = reload(&mut w, &mut kept, &file).await;
    assert!(
        matches!(next, Some(Offer::Replaced { recovered: false })),
        "{next:?}"
    );
    assert_eq!(*kept.get(), 3);
}

#[tokio::test]
async fn new_paths_are_watched_and_a_missing_file_is_a_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    fs::write(&a, "a").expect("write");
    let mut w = quick(vec![a.clone()]);
    w.mark_seen().await;
    w.watch_paths(vec![a.clone(), b.clone()]);
    assert!(seen(&mut w).await, "new paths: one more look");
    fs::write(&b, "b").expect("write");
    assert!(seen(&mut w).await, "b appearing is a change");
    fs::remove_file(&b).expect("remove");
    assert!(seen(&mut w).await, "b going is a change");
    assert!(quiet(&mut w).await, "still gone is not");
    assert!(w.notify_error().is_none(), "{:?}", w.notify_error());
}

#[tokio::test]
async fn reading_the_files_does_not_wake_the_watch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a.yaml");
    fs::write(&file, "one").expect("write");
    // A poll too slow to matter here: only events could wake it.
    let mut w = FileWatch::new(vec![file.clone()], Duration::from_secs(60))
        .debounce(Duration::from_millis(10));
    w.mark_seen().await;
    assert!(w.notify_error().is_none(), "{:?}", w.notify_error());
    let read = file.clone();
    let reader = tokio::task::spawn_blocking(move || {
        for _ in 0..20 {
            let _ = fs::read(&read);
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    // Only events could wake it here, so `quiet` (which wants polls) does
    // not apply; the evidence is the reader's 20 reads, done below.
    let silent = timeout(QUIET, w.changed()).await.is_err();
    assert!(silent, "reads are no change");
    timeout(WAIT, reader)
        .await
        .expect("reader done")
        .expect("reader");
    // The interval's first tick is immediate: one look, none per read.
    assert!(w.looks <= 1, "{} looks for 20 reads", w.looks);
    // And the watch was live all along: a write, which only an event can
    // report within the minute-long poll, is seen.
    fs::write(&file, "two").expect("write");
    assert!(seen(&mut w).await, "a write wakes the same watch");
}
