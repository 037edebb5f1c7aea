// A small terminal over the exec WebSocket (`v5.channel.k8s.io`), with no
// third-party code: output in a <pre>, one input line, and the terminal's
// size in rows and columns sent to the container whenever the element's
// size changes. Every frame starts with its channel: 0 stdin, 1 stdout,
// 2 stderr, 3 status (JSON), 4 resize (JSON {"Width","Height"}).

const STDIN = 0, STDOUT = 1, STDERR = 2, STATUS = 3, RESIZE = 4;
const encoder = new TextEncoder();

// What a TTY sends that a <pre> cannot show: colour and cursor sequences,
// bells, carriage returns. Backspace erases the character before it.
export function printable(text) {
  let out = text
    .replace(/\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)/g, "")
    .replace(/\x1b\[[0-9;?]*[ -\/]*[@-~]/g, "")
    .replace(/\x1b[()][A-Za-z0-9]/g, "")
    .replace(/\x1b[=>78]/g, "")
    .replace(/\r\n/g, "\n")
    .replace(/\r/g, "")
    .replace(/\x07/g, "");
  while (/[^\b\n]\x08/.test(out)) out = out.replace(/[^\b\n]\x08/, "");
  return out.replace(/\x08/g, "");
}

function frame(channel, bytes) {
  const data = new Uint8Array(bytes.length + 1);
  data[0] = channel;
  data.set(bytes, 1);
  return data;
}

export class Terminal {
  // `output` is a <pre>; `onEnd(message)` is told once when the session ends.
  constructor(url, output, onEnd) {
    this.output = output;
    this.onEnd = onEnd;
    this.decoder = new TextDecoder();
    this.ended = false;
    this.socket = new WebSocket(url, ["v5.channel.k8s.io"]);
    this.socket.binaryType = "arraybuffer";
    this.socket.addEventListener("open", () => this.resize());
    this.socket.addEventListener("message", (event) => this.receive(new Uint8Array(event.data)));
    this.socket.addEventListener("close", () => this.end("The terminal session ended."));
    this.observer = new ResizeObserver(() => this.resize());
    this.observer.observe(output);
  }

  receive(data) {
    if (!data.length) return;
    const rest = data.subarray(1);
    if (data[0] === STDOUT || data[0] === STDERR) {
      this.output.append(printable(this.decoder.decode(rest, { stream: true })));
      this.output.scrollTop = this.output.scrollHeight;
    } else if (data[0] === STATUS) {
      try {
        const status = JSON.parse(new TextDecoder().decode(rest));
        if (status.status !== "Success") this.end(status.message || "The command failed.");
      } catch {
        this.end("The terminal session ended.");
      }
    }
  }

  send(text) {
    if (this.socket.readyState === WebSocket.OPEN) this.socket.send(frame(STDIN, encoder.encode(text)));
  }

  // Rows and columns that fit the output element in its own font.
  size() {
    const probe = document.createElement("span");
    probe.textContent = "0".repeat(10);
    probe.style.visibility = "hidden";
    this.output.append(probe);
    const box = probe.getBoundingClientRect();
    probe.remove();
    const cell = { width: box.width / 10 || 8, height: box.height || 16 };
    return {
      Width: Math.max(20, Math.floor(this.output.clientWidth / cell.width)),
      Height: Math.max(5, Math.floor(this.output.clientHeight / cell.height)),
    };
  }

  resize() {
    if (this.socket.readyState !== WebSocket.OPEN) return;
    this.socket.send(frame(RESIZE, encoder.encode(JSON.stringify(this.size()))));
  }

  end(message) {
    if (this.ended) return;
    this.ended = true;
    this.observer.disconnect();
    this.onEnd(message);
  }

  close() {
    this.ended = true;
    this.observer.disconnect();
    this.socket.close();
  }
}
