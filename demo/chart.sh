#!/bin/bash
# A picture of the demo: who held the lock over time, the token of each grant,
# and every write, accepted or refused, one panel per run.  From the demo's
# --json output (non-JSON lines, such as pg_virtualenv's, are skipped):
#
#   bash scripts/demo.sh --json | bash demo/chart.sh - docs/leadership.png
#   build/demo/pg_fencing_demo --json > demo.json; bash demo/chart.sh demo.json demo.png
#
# Usage: chart.sh [--run RUN]... INPUT|- OUTPUT.png
#   --run RUN   chart only that run (pause/off, pause/on, leader,
#               interleave/per-row, interleave/lock-wide, permit/off,
#               permit/on; repeatable);
#               default: every run in the input, in its order
#
# A lease is drawn from its grant to its release or, when its holder lost it
# (paused past its ttl, killed), to the next grant of the lock: the demo logs
# grants and releases, not the moment a lease ran out, and the next holder
# is granted the lock as soon as it has.  Exit status: 0 with the PNG
# written, 1 when the input has no run to chart, 2 for a bad command line.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
usage() { sed -n '9,13p' "$0" | sed 's/^# \{0,1\}//'; }
bad_usage() {
  usage >&2
  exit 2
}

runs=()
while (($#)); do
  case $1 in
    --run) (($# >= 2)) || bad_usage; runs+=("$2"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -?*) bad_usage ;;
    *) break ;;
  esac
done
(($# == 2)) || bad_usage
input=$1
output=$2
[[ $input == - || -r $input ]] || { echo "chart.sh: cannot read $input" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "chart.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }

work=$(mktemp -d /tmp/pg_fencing_chart.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [[ $input == - ]]; then cat >"$work/demo.json"; else cat -- "$input" >"$work/demo.json"; fi

# The demo's JSON lines become gnuplot data: per run, four blocks (index
# 4*k .. 4*k+3: leases, stopped or killed processes, writes that landed,
# writes refused; chart.gp says their columns) and, in meta.gp, the run's
# title, lanes and time span.
RUNS="${runs[*]:-}" perl -MJSON::PP -e '
use strict;
use warnings;
my ($in, $data_out, $meta_out) = @ARGV;
my %want = map { $_ => 1 } split " ", $ENV{RUNS} // "";
my (@order, %ev, %verdict);
open my $fh, "<", $in or die "chart.sh: $in: $!\n";
while (my $line = <$fh>) {
	next unless $line =~ /^\s*\{/;
	my $o = eval { JSON::PP::decode_json($line) } or next;
	my $run = $o->{run} // next;
	next if %want && !$want{$run};
	push @order, $run unless $ev{$run};
	if (($o->{type} // "") eq "event") { push @{ $ev{$run} }, $o }
	elsif (($o->{type} // "") eq "verdict") { $verdict{$run} = $o->{ok} ? "ok" : "FAILED" }
}
close $fh;
exit 1 unless @order;

sub gq { my $s = shift; $s =~ s/\\/\\\\/g; $s =~ s/"/\\"/g; return "\"$s\"" }

open my $data, ">", $data_out or die "$data_out: $!\n";
my @meta;
my $k = 0;
for my $run (@order) {
	$k++;
	my @e = sort { $a->{t_ms} <=> $b->{t_ms} } @{ $ev{$run} };
	my $end = $e[-1]{t_ms} / 1000;
	# Lanes: the workers, in the order the demo started them.
	my (@lanes, %lane);
	for my $x (@e) {
		my $who = $x->{event} eq "started" ? $x->{subject} : $x->{who};
		next if !defined $who || $who eq "demo" || exists $lane{$who};
		push @lanes, $who;
		$lane{$who} = 0;
	}
	$lane{ $lanes[$_] } = @lanes - $_ for 0 .. $#lanes;    # the first at the top
	my (@leases, @down, @landed, @refused, %open, %stopped);
	my ($grants, $refusals, $stale) = (0, 0, 0);
	my @tokens;
	for my $x (@e) {
		my $t = $x->{t_ms} / 1000;
		my ($who, $what) = ($x->{who}, $x->{event});
		if ($what eq "acquired") {
			# A grant ends the lease of every other holder: it had run out.
			for my $w (keys %open) {
				next if $w eq $who;
				my $l = delete $open{$w};
				push @leases, [ $lane{$w}, $l->[0], $t, $l->[1], @lanes - $lane{$w} + 1 ];
			}
			$open{$who} //= [ $t, $x->{token} ];
			$grants++;
			push @tokens, $x->{token};
		} elsif ($what eq "released") {
			if (my $l = delete $open{$who}) {
				push @leases, [ $lane{$who}, $l->[0], $t, $l->[1], @lanes - $lane{$who} + 1 ];
			}
		} elsif ($what eq "paused" || $what eq "killed") {
			$stopped{ $x->{subject} } = [ $t, $what eq "paused" ? 1 : 2 ];
		} elsif ($what eq "resumed") {
			if (my $s = delete $stopped{ $x->{subject} }) {
				push @down, [ $lane{ $x->{subject} }, $s->[0], $t, $s->[1] ];
			}
		} elsif ($what eq "write_accepted") {
			my $is_stale = defined $x->{alarm} ? 1 : 0;
			$stale += $is_stale;
			push @landed, [ $t, $lane{$who}, $is_stale ];
		} elsif ($what eq "write_rejected") {
			$refusals++;
			push @refused, [ $t, $lane{$who}, $refusals ];
		}
	}
	push @leases, [ $lane{$_}, $open{$_}[0], $end, $open{$_}[1], @lanes - $lane{$_} + 1 ] for keys %open;
	push @down, [ $lane{$_}, $stopped{$_}[0], $end, $stopped{$_}[1] ] for keys %stopped;
	# Gnuplot cannot plot an empty block: one point left of the x range
	# stands in for "none".
	for my $block (\@leases, \@down, \@landed, \@refused) {
		@$block = ([ (-1) x 5 ]) unless @$block;
		print $data join(" ", @$_), "\n" for @$block;
		print $data "\n\n";
	}
	my $title = sprintf "%s: %d grant%s (token%s %s), %d write%s refused%s%s",
		$run, $grants, $grants == 1 ? "" : "s", @tokens == 1 ? "" : "s",
		join(" -> ", @tokens) || "none", $refusals, $refusals == 1 ? "" : "s",
		$stale ? ", $stale stale write" . ($stale == 1 ? "" : "s") . " landed" : "",
		defined $verdict{$run} ? "  [demo verdict: $verdict{$run}]" : "";
	my $ytics = join ", ", map { gq($lanes[$_]) . " " . (@lanes - $_) } 0 .. $#lanes;
	push @meta, "runtitle[$k] = " . gq($title), "lanes[$k] = " . scalar(@lanes),
		"yticlist[$k] = " . gq("($ytics)"), "xend[$k] = $end";
}
open my $meta, ">", $meta_out or die "$meta_out: $!\n";
print $meta "runs = $k\narray runtitle[$k]\narray lanes[$k]\narray yticlist[$k]\narray xend[$k]\n";
print $meta "$_\n" for @meta;
' "$work/demo.json" "$work/chart.dat" "$work/meta.gp" || {
  rc=$?
  ((rc == 1)) && echo "chart.sh: no run to chart in $input${runs[*]:+ (--run ${runs[*]})}" >&2
  exit "$rc"
}

gnuplot -e "data='$work/chart.dat'; meta='$work/meta.gp'; out='$work/chart.png'" "$HERE/chart.gp"
[[ -s $work/chart.png ]] || { echo "chart.sh: gnuplot wrote no PNG" >&2; exit 1; }
mv -f "$work/chart.png" "$output"
echo "chart.sh: wrote $output"
