// Draw at most once per animation frame, however fast the feed is.
//
// State changes call invalidate(name); the renderer registered under that name runs once in the next
// animation frame, after every message that arrived before it has been applied. A burst of 1,000 feed
// messages between two frames costs 1,000 cheap state updates and one redraw.

const renderers = new Map();
const dirty = new Set();
let scheduled = false;

/** Counters the tests read: frames drawn and redraws per renderer. */
export const frameStats = { frames: 0, renders: {} };

export function onFrame(name, render) {
  renderers.set(name, render);
}

export function invalidate(name) {
  dirty.add(name);
  if (!scheduled) {
    scheduled = true;
    requestAnimationFrame(flush);
  }
}

function flush() {
  scheduled = false;
  frameStats.frames += 1;
  const names = [...dirty];
  dirty.clear();
  for (const name of names) {
    const render = renderers.get(name);
    if (!render) continue;
    frameStats.renders[name] = (frameStats.renders[name] || 0) + 1;
    try {
      render();
    } catch (err) {
      // One broken panel must not stop the others from drawing; report it where it can be seen.
      reportError(err);
    }
  }
}
