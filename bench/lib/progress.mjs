// A one-line progress bar on stderr (redrawn in place on a TTY, plain lines otherwise).
export class Progress {
  constructor(total, stream = process.stderr) {
    this.total = total;
    this.done = 0;
    this.stream = stream;
    this.label = "";
    this.tty = Boolean(stream.isTTY);
    this.start = performance.now();
    this.lastPlain = "";
  }

  set(label, fraction = 0) {
    this.label = label;
    this.fraction = Math.max(0, Math.min(1, fraction));
    this.draw();
  }

  step(label) {
    this.done++;
    this.fraction = 0;
    this.label = label ?? this.label;
    this.draw();
  }

  draw() {
    const overall = Math.min(1, (this.done + (this.fraction ?? 0)) / this.total);
    const width = 28;
    const filled = Math.round(overall * width);
    const secs = ((performance.now() - this.start) / 1000).toFixed(0);
    const line = `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${(overall * 100).toFixed(0).padStart(3)}% ${secs}s ${this.label}`;
    if (this.tty) this.stream.write(`\r\x1b[2K${line.slice(0, (this.stream.columns ?? 120) - 1)}`);
    else if (this.label !== this.lastPlain) {
      this.lastPlain = this.label;
      this.stream.write(line + "\n");
    }
  }

  finish() {
    if (this.tty) this.stream.write("\r\x1b[2K");
    this.stream.write(`done in ${((performance.now() - this.start) / 1000).toFixed(1)} s\n`);
  }
}
