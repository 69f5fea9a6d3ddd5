// HTTP calls to the server. Every answer resolves to {status, body}; only a network failure rejects.

export async function http(method, path, { token, body } = {}) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${headerText(token)}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const text = await res.text();
  let parsed;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { error: text.slice(0, 200) || res.statusText };
  }
  return { status: res.status, body: parsed };
}

/**
 * A token as header text: its UTF-8 bytes, one character each (fetch sends characters up to 255 as those
 * bytes, and the server reads headers as UTF-8), so a token with any letter works over HTTP too.
 */
function headerText(token) {
  return String.fromCharCode(...new TextEncoder().encode(token));
}
