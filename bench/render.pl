#!/usr/bin/perl
# Turns bench/measure.sh's CSV into the results table (markdown) and the
# data for the chart.  Usage: render.pl RAW.csv OUT.md CHART.dat
use strict;
use warnings;

my ($raw, $md_out, $chart_out) = @ARGV;
my %samples;    # "benchmark|variant|clients" => [values]
open my $in, '<', $raw or die "$raw: $!";
while (<$in>) {
	chomp;
	my ($bench, $variant, $clients, $round, $value, $unit) = split /,/;
	next unless defined $value && $value =~ /^-?[\d.]+(?:e[-+]?\d+)?$/;
	push @{ $samples{"$bench|$variant|$clients"} }, $value;
}
close $in;

sub stats {
	my @v = sort { $a <=> $b } @{ $_[0] // [] };
	return unless @v;
	my $median = @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2;
	return ($median, $v[0], $v[-1], scalar @v);
}
sub median_of { my @s = stats($samples{ $_[0] }); return $s[0] }
sub fmt { my ($x) = @_; return defined $x ? sprintf('%.4g', $x) : 'n/a' }
sub cell {
	my ($key) = @_;
	my ($median, $min, $max, $n) = stats($samples{$key});
	return 'n/a' unless defined $median;
	return sprintf('%s (%s–%s, n=%d)', fmt($median), fmt($min), fmt($max), $n);
}

my @md;
my @chart;    # label, ratio, target, 1 if lower is better
sub ratio_row {
	my ($label, $key, $base_key, $target, $lower_is_better) = @_;
	my ($v, $b) = (median_of($key), median_of($base_key));
	my $ratio = (defined $v && defined $b && $b > 0) ? $v / $b : undef;
	my $met = '';
	if (defined $target && defined $ratio) {
		$met = ($lower_is_better ? $ratio <= $target : $ratio >= $target) ? ' met' : ' **not met**';
		$met = ($lower_is_better ? ' (target ≤ ' : ' (target ≥ ') . "$target)$met";
	}
	push @chart, [ $label, $ratio, $target, $lower_is_better ] if defined $ratio;
	return "| $label | " . cell($key) . ' | ' . cell($base_key) . ' | ' . fmt($ratio) . "$met |";
}

my @variants = qw(guard lockwide plpgsql generic cas);
my %name = (
	none => 'no trigger', guard => 'fencing_guard (per row)', lockwide => 'fencing_guard (lock-wide)',
	plpgsql => 'hand-written PL/pgSQL, static column', generic => 'PL/pgSQL, column as argument',
	cas => 'compare-and-swap WHERE, no trigger');

push @md, '### Bulk UPDATE of every row, one statement (ms, lower is better)', '',
  '| variant | median (min–max) | no trigger | ratio |', '|---|---|---|---|';
for my $v (@variants) {
	push @md, ratio_row("bulk: $name{$v}", "bulk_update|$v|1", 'bulk_update|none|1', $v eq 'guard' ? 1.05 : undef, 1);
}
push @md, '', '### Single-row UPDATE, pgbench (tps, higher is better)', '',
  '| variant, clients | median (min–max) | no trigger | ratio |', '|---|---|---|---|';
for my $c (sort { $a <=> $b } grep { defined } map { /^single_row_tps\|none\|(\d+)$/ ? $1 : undef } keys %samples) {
	for my $v (@variants) {
		push @md, ratio_row("single row, $c client(s): $name{$v}", "single_row_tps|$v|$c", "single_row_tps|none|$c",
			$v eq 'guard' ? 0.98 : undef, 0);
	}
}
push @md, '', '### fencing_grant() against nextval() (tps, 1 client)', '',
  '| synchronous_commit | fencing_grant() | nextval() | ratio |', '|---|---|---|---|';
for my $mode (qw(on off)) {
	push @md, ratio_row("grant, synchronous_commit=$mode", "grant_tps_sync_$mode|grant|1", "grant_tps_sync_$mode|nextval|1",
		$mode eq 'on' ? 0.95 : undef, 0);
}
push @md, '', '### Leases (per second, higher is better)', '',
  '| operation, clients | median (min–max) | bare single-row UPDATE | ratio |', '|---|---|---|---|';
for my $c (sort { $a <=> $b } grep { defined } map { /^lease_cycle_tps\|acquire_release\|(\d+)$/ ? $1 : undef } keys %samples) {
	push @md, ratio_row("acquire+release cycles, $c client(s)", "lease_cycle_tps|acquire_release|$c", "lease_cycle_tps|bare_update|$c", 0.5, 0);
	push @md, ratio_row("renewals, $c client(s)", "lease_renew_tps|renew|$c", "lease_cycle_tps|bare_update|$c", 0.95, 0);
}
# Hand-over to waiting acquirers: percentiles of every sample (not of round
# medians), per number of waiters; then at a lease's end.
my $percentiles = sub {
	my @h = sort { $a <=> $b } @_;
	my $p = sub { $h[ int($_[0] * $#h + 0.5) ] };
	return sprintf('%d | %s | %s | %s | %s | %s', scalar @h, fmt($h[0]), fmt($p->(0.5)), fmt($p->(0.9)),
		fmt($p->(0.99)), fmt($h[-1]));
};
# The function form's variants carry no prefix (the names of the runs before
# 1.7), CALL fencing_await's carry "await_".
my %waiting_form = ('' => 'fencing_acquire()', 'await_' => 'CALL fencing_await');
my @waiter_counts = sort { $a <=> $b } keys %{ { map { /^handover_latency\|(?:await_)?before_commit\|(\d+)$/ ? ($1 => 1) : () }
	  keys %samples } };
if (@waiter_counts) {
	push @md, '', '### Hand-over to a waiting acquirer (ms from the release\'s commit to the next grant)', '',
	  'The commit is bracketed: *before* = the release transaction\'s last statement before COMMIT (includes',
	  'its WAL flush); *after* = the releaser\'s first statement after COMMIT returned. The waiters wait in',
	  '`fencing_acquire(…, wait)` or in `CALL fencing_await(…)`, each form on a lock of its own.', '',
	  '| waiters, form, from | samples | min | p50 | p90 | p99 | max |', '|---|---|---|---|---|---|---|';
	for my $w (@waiter_counts) {
		for my $form ('', 'await_') {
			for my $from (qw(before_commit after_commit)) {
				my $h = $samples{"handover_latency|$form$from|$w"} or next;
				(my $label = $from) =~ s/_commit//;
				push @md, "| $w, $waiting_form{$form}, $label | " . $percentiles->(@$h) . ' |';
			}
		}
	}
}
my @expiry = grep { $samples{"handover_after_expiry|$_->[0]|1"} } ([ wait => 'fencing_acquire()' ], [ await => 'CALL fencing_await' ]);
if (@expiry) {
	push @md, '', '### Hand-over at a lease\'s end (ms from expires_at to the waiter\'s grant)', '',
	  '| form | samples | min | p50 | p90 | p99 | max |', '|---|---|---|---|---|---|---|';
	push @md, "| $_->[1] | " . $percentiles->(@{ $samples{"handover_after_expiry|$_->[0]|1"} }) . ' |' for @expiry;
}

open my $md, '>', $md_out or die "$md_out: $!";
print $md join("\n", @md), "\n";
close $md;

# Chart data: one bar per comparison, as "how many times the baseline's
# cost" (time ratios as they are, throughput ratios inverted), so that for
# every bar lower is better and 1 is the baseline.
open my $ch, '>', $chart_out or die "$chart_out: $!";
my $i = 0;
for my $row (@chart) {
	my ($label, $ratio, $target, $lower) = @$row;
	my $cost = $lower ? $ratio : 1 / $ratio;
	my $target_cost = defined $target ? ($lower ? $target : 1 / $target) : 'NaN';
	$label =~ s/"/'/g;
	printf $ch "%d \"%s\" %.4f %s\n", $i++, $label, $cost, $target_cost;
}
close $ch;
